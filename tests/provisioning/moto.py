"""A real moto server on loopback, and counting what it holds by the job's tag with plain
boto3 (independent of the provider code under test)."""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import boto3
from botocore.config import Config

ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_moto(log_path: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "MOTO_IAM_LOAD_MANAGED_POLICIES": "true"}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.provisioning.moto_server", "-H", "127.0.0.1", "-p", str(port)],
        cwd=ROOT, env=env, stdout=log_path.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=1)
            return process, url
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"moto_server did not start: {log_path.read_text()[-2000:]}")


def reset(url: str) -> None:
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"))


def raw_client(url: str, service: str):
    return boto3.client(
        service, endpoint_url=url, region_name=REGION, aws_access_key_id="testing",
        aws_secret_access_key="testing", config=Config(retries={"max_attempts": 1}),
    )  # fmt: skip


def tagged_resources(url: str, token: str) -> dict[str, int]:
    """How many live resources of each kind carry the job's token tag."""
    ec2, elbv2 = raw_client(url, "ec2"), raw_client(url, "elbv2")
    iam, autoscaling = raw_client(url, "iam"), raw_client(url, "autoscaling")
    route53 = raw_client(url, "route53")
    tag = [{"Name": "tag:zopday:token", "Values": [token]}]
    instances = [
        i for r in ec2.describe_instances(Filters=tag)["Reservations"] for i in r["Instances"]
        if i["State"]["Name"] not in ("terminated", "shutting-down")
    ]  # fmt: skip

    def has_token(tags) -> bool:
        return any(t["Key"] == "zopday:token" and t["Value"] == token for t in tags)

    # moto ignores DescribeNatGateways' tag filter: the tags are checked here.
    nats = [
        n for n in ec2.describe_nat_gateways(Filter=tag)["NatGateways"]
        if n["State"] not in ("deleted", "deleting") and has_token(n.get("Tags", []))
    ]  # fmt: skip

    roles = [
        r for r in iam.list_roles()["Roles"]
        if has_token(iam.list_role_tags(RoleName=r["RoleName"])["Tags"])
    ]  # fmt: skip
    # moto does not implement list_instance_profile_tags: profiles go by their name.
    profiles = [
        p for p in iam.list_instance_profiles()["InstanceProfiles"]
        if token in p["InstanceProfileName"]
    ]  # fmt: skip
    lbs = elbv2.describe_load_balancers()["LoadBalancers"]
    tagged_lbs = [
        lb for lb in lbs
        if has_token(elbv2.describe_tags(ResourceArns=[lb["LoadBalancerArn"]])["TagDescriptions"][0]["Tags"])
    ]  # fmt: skip
    groups = elbv2.describe_target_groups()["TargetGroups"]
    tagged_groups = [
        g for g in groups
        if has_token(elbv2.describe_tags(ResourceArns=[g["TargetGroupArn"]])["TagDescriptions"][0]["Tags"])
    ]  # fmt: skip
    listeners = sum(
        len(elbv2.describe_listeners(LoadBalancerArn=lb["LoadBalancerArn"])["Listeners"])
        for lb in tagged_lbs
    )
    asgs = [
        g for g in autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"]
        if has_token(g.get("Tags", []))
    ]  # fmt: skip
    zones = [
        z for z in route53.list_hosted_zones()["HostedZones"]
        if has_token(route53.list_tags_for_resource(
            ResourceType="hostedzone", ResourceId=z["Id"].split("/")[-1])["ResourceTagSet"]["Tags"])
    ]  # fmt: skip
    counts = {
        "vpcs": len(ec2.describe_vpcs(Filters=tag)["Vpcs"]),
        "subnets": len(ec2.describe_subnets(Filters=tag)["Subnets"]),
        "internet_gateways": len(ec2.describe_internet_gateways(Filters=tag)["InternetGateways"]),
        "elastic_ips": len(ec2.describe_addresses(Filters=tag)["Addresses"]),
        "nat_gateways": len(nats),
        "route_tables": len(ec2.describe_route_tables(Filters=tag)["RouteTables"]),
        "security_groups": len(ec2.describe_security_groups(Filters=tag)["SecurityGroups"]),
        "launch_templates": len(ec2.describe_launch_templates(Filters=tag)["LaunchTemplates"]),
        "instances": len(instances),
        "iam_roles": len(roles),
        "instance_profiles": len(profiles),
        "auto_scaling_groups": len(asgs),
        "load_balancers": len(tagged_lbs),
        "target_groups": len(tagged_groups),
        "listeners": listeners,
        "hosted_zones": len(zones),
    }
    return {kind: count for kind, count in counts.items() if count}
