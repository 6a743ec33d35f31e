"""The provisioning pipeline against moto, next to plain boto3 doing the same work.

Prints, in one run, on a fresh SQLite database, a private Redis and a private moto server:
- the wall time of a Fixed + LB job (11 steps) next to the sum of the raw boto3 calls a plain
  script makes for the same resources (same settings and tags; no lookups, checks or bookkeeping;
  its clients built beforehand, as the pipeline's are cached). The job is timed twice: run in
  this process, and through the 2 Celery workers (each step queued on commit and taken by a
  worker). Medians of N runs, the three interleaved; moto answers the SSM readiness check at
  once, so there are no readiness waits to exclude on either side;
- jobs per minute with 20 concurrent Fixed jobs (7 steps) on 2 real Celery workers;
- the same with 10, 30 and 100 concurrent jobs (the growth table), with the p99 of a job's wall
  time (its creation to its finish).

    python benchmarks/pipeline.py [--runs 5] [--jobs 20]
"""

import argparse
import base64
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

QUEUE = "provisioning-bench"
os.environ.update(
    ZOPDAY_PROVISIONING_QUEUE=QUEUE,
    ZOPDAY_PROVISIONING_POLL_SECONDS="0.05",
    ZOPDAY_PROVISIONING_RETRY_BASE_SECONDS="0.05",
)
sys.path.insert(0, str(Path(__file__).resolve().parent))

import boto3  # noqa: E402
from botocore.config import Config  # noqa: E402
from django.core.management import call_command  # noqa: E402
from stack import ROOT, WORK, jobs_settled, provisioning_workers, start_redis  # noqa: E402

from instances.choices import Role  # noqa: E402
from instances.models import Membership, Project  # noqa: E402
from provisioning.choices import JobStatus  # noqa: E402
from provisioning.infra import InfraConfig  # noqa: E402
from provisioning.models import ProvisioningJob  # noqa: E402
from provisioning.pipeline import job_run_inline  # noqa: E402
from provisioning.services.accounts import account_create  # noqa: E402
from provisioning.services.jobs import job_create  # noqa: E402
from provisioning.userdata import user_data  # noqa: E402

VENV_BIN = Path(sys.executable).parent
SIZES = (10, 30, 100)  # concurrent Fixed jobs, for the growth table


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(argv: list[str], log: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        argv, cwd=ROOT, env={**os.environ, **env}, stdout=(WORK / log).open("w"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip


def wait_http(url: str) -> None:
    for _ in range(300):
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


def raw_clients(url: str) -> dict[str, Any]:
    """The plain script's clients, built once and outside the timing: the pipeline's are cached
    per process and already built when its runs are timed, and the target compares with the sum
    of the raw calls."""
    kw = dict(
        endpoint_url=url, region_name="us-east-1", aws_access_key_id="raw",
        aws_secret_access_key="raw", config=Config(retries={"max_attempts": 1}),
    )  # fmt: skip
    return {name: boto3.client(name, **kw) for name in ("ec2", "iam", "ssm", "elbv2", "route53")}  # type: ignore[call-overload]


def raw_script(clients: dict[str, Any], n: int) -> float:
    """The same resources as a Fixed + LB job, with the same settings and tags, made by
    straight-line boto3 calls: no lookups, no checks, no bookkeeping."""
    ec2, iam, ssm = clients["ec2"], clients["iam"], clients["ssm"]
    elbv2, route53 = clients["elbv2"], clients["route53"]
    name = f"raw-{n}"

    def tags(role: str) -> list[dict[str, str]]:
        return [
            {"Key": "zopday:job", "Value": str(n)}, {"Key": "zopday:token", "Value": name},
            {"Key": "zopday:project", "Value": "bench"},
            {"Key": "zopday:managed-by", "Value": "zopday-console"},
            {"Key": "zopday:role", "Value": role}, {"Key": "Name", "Value": f"{name}-{role}"},
        ]  # fmt: skip

    def spec(kind: str, role: str) -> list[dict[str, Any]]:
        return [{"ResourceType": kind, "Tags": tags(role)}]

    started = time.perf_counter()
    ami = ssm.get_parameter(
        Name="/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
    )["Parameter"]["Value"]
    vpc = ec2.create_vpc(CidrBlock="10.42.0.0/16", TagSpecifications=spec("vpc", "vpc"))["Vpc"][
        "VpcId"
    ]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    private = ec2.create_subnet(
        VpcId=vpc, CidrBlock="10.42.0.0/24", AvailabilityZone="us-east-1a",
        TagSpecifications=spec("subnet", "private_subnet"),
    )["Subnet"]["SubnetId"]  # fmt: skip
    public = ec2.create_subnet(
        VpcId=vpc, CidrBlock="10.42.1.0/24", AvailabilityZone="us-east-1a",
        TagSpecifications=spec("subnet", "public_subnet"),
    )["Subnet"]["SubnetId"]  # fmt: skip
    public_b = ec2.create_subnet(
        VpcId=vpc, CidrBlock="10.42.2.0/24", AvailabilityZone="us-east-1b",
        TagSpecifications=spec("subnet", "public_subnet_b"),
    )["Subnet"]["SubnetId"]  # fmt: skip
    igw = ec2.create_internet_gateway(TagSpecifications=spec("internet-gateway", "igw"))[
        "InternetGateway"
    ]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
    eip = ec2.allocate_address(Domain="vpc", TagSpecifications=spec("elastic-ip", "nat-eip"))[
        "AllocationId"
    ]
    nat = ec2.create_nat_gateway(
        SubnetId=public, AllocationId=eip, TagSpecifications=spec("natgateway", "nat")
    )["NatGateway"]["NatGatewayId"]
    public_rt = ec2.create_route_table(
        VpcId=vpc, TagSpecifications=spec("route-table", "public_routes")
    )["RouteTable"]["RouteTableId"]
    ec2.create_route(RouteTableId=public_rt, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw)
    ec2.associate_route_table(RouteTableId=public_rt, SubnetId=public)
    ec2.associate_route_table(RouteTableId=public_rt, SubnetId=public_b)
    private_rt = ec2.create_route_table(
        VpcId=vpc, TagSpecifications=spec("route-table", "private_routes")
    )["RouteTable"]["RouteTableId"]
    ec2.create_route(RouteTableId=private_rt, DestinationCidrBlock="0.0.0.0/0", NatGatewayId=nat)
    ec2.associate_route_table(RouteTableId=private_rt, SubnetId=private)
    iam.create_role(
        RoleName=name,
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "ec2.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
        Tags=tags("role"),
    )
    iam.attach_role_policy(
        RoleName=name, PolicyArn="arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
    )
    iam.create_instance_profile(InstanceProfileName=name, Tags=tags("instance-profile"))
    iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    sg = ec2.create_security_group(
        GroupName=name, Description="vm", VpcId=vpc,
        TagSpecifications=spec("security-group", "vm-sg"),
    )["GroupId"]  # fmt: skip
    data = base64.b64encode(user_data(InfraConfig()).encode()).decode()
    interface = {
        "DeviceIndex": 0,
        "AssociatePublicIpAddress": False,
        "Groups": [sg],
        "SubnetId": private,
        "DeleteOnTermination": True,
    }
    lt = ec2.create_launch_template(
        LaunchTemplateName=name,
        LaunchTemplateData={
            "ImageId": ami,
            "InstanceType": "t3.micro",
            "IamInstanceProfile": {"Name": name},
            "UserData": data,
            "NetworkInterfaces": [interface],
            "BlockDeviceMappings": [
                {
                    "DeviceName": "/dev/xvda",
                    "Ebs": {
                        "VolumeSize": 20,
                        "VolumeType": "gp3",
                        "Encrypted": True,
                        "DeleteOnTermination": True,
                    },
                }
            ],
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tags("vm")},
                {"ResourceType": "volume", "Tags": tags("volume")},
            ],
        },
        TagSpecifications=spec("launch-template", "launch-template"),
    )["LaunchTemplate"]["LaunchTemplateId"]
    # The interface stated again, as the pipeline does (moto misreads the template's boolean).
    instance = ec2.run_instances(
        LaunchTemplate={"LaunchTemplateId": lt}, MinCount=1, MaxCount=1,
        NetworkInterfaces=[interface], TagSpecifications=spec("instance", "vm"),
    )["Instances"][0]["InstanceId"]  # fmt: skip
    command = ssm.send_command(
        InstanceIds=[instance],
        DocumentName="AWS-RunShellScript",
        Parameters={"commands": ["test -f /var/lib/zopday/bootstrap-complete"]},
    )["Command"]["CommandId"]
    ssm.get_command_invocation(CommandId=command, InstanceId=instance)
    lb_sg = ec2.create_security_group(
        GroupName=f"{name}-lb", Description="lb", VpcId=vpc,
        TagSpecifications=spec("security-group", "lb-sg"),
    )["GroupId"]  # fmt: skip
    ec2.authorize_security_group_ingress(
        GroupId=lb_sg,
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": 80,
                "ToPort": 80,
                "IpRanges": [{"CidrIp": "0.0.0.0/0"}],
            }
        ],
    )
    ec2.authorize_security_group_ingress(
        GroupId=sg,
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": 80,
                "ToPort": 80,
                "UserIdGroupPairs": [{"GroupId": lb_sg}],
            }
        ],
    )
    lb = elbv2.create_load_balancer(
        Name=name,
        Subnets=[public, public_b],
        SecurityGroups=[lb_sg],
        Scheme="internet-facing",
        Type="application",
        Tags=tags("lb"),
    )["LoadBalancers"][0]
    tg = elbv2.create_target_group(
        Name=name,
        Protocol="HTTP",
        Port=80,
        VpcId=vpc,
        TargetType="instance",
        HealthCheckProtocol="HTTP",
        HealthCheckPath="/healthz",
        HealthCheckPort="80",
        Tags=tags("tg"),
    )["TargetGroups"][0]["TargetGroupArn"]
    elbv2.register_targets(TargetGroupArn=tg, Targets=[{"Id": instance}])
    elbv2.create_listener(
        LoadBalancerArn=lb["LoadBalancerArn"],
        Protocol="HTTP",
        Port=80,
        DefaultActions=[{"Type": "forward", "TargetGroupArn": tg}],
        Tags=tags("listener"),
    )
    zone = route53.create_hosted_zone(Name=f"raw{n}.example.com.", CallerReference=name)[
        "HostedZone"
    ]["Id"]
    route53.change_tags_for_resource(
        ResourceType="hostedzone", ResourceId=zone.split("/")[-1], AddTags=tags("hosted-zone")
    )
    route53.change_resource_record_sets(
        HostedZoneId=zone,
        ChangeBatch={
            "Changes": [
                {
                    "Action": "UPSERT",
                    "ResourceRecordSet": {
                        "Name": f"app.raw{n}.example.com.",
                        "Type": "A",
                        "AliasTarget": {
                            "HostedZoneId": lb["CanonicalHostedZoneId"],
                            "DNSName": lb["DNSName"],
                            "EvaluateTargetHealth": False,
                        },
                    },
                }
            ]
        },
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20)
    args = parser.parse_args()

    call_command("migrate", verbosity=0)
    redis = start_redis()
    port = free_port()
    moto = start([str(VENV_BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)], "moto.log",
                 MOTO_IAM_LOAD_MANAGED_POLICIES="true")  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/moto-api/")
    workers: list[subprocess.Popen] = []
    try:
        from django.conf import settings
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.create_user("bench", is_superuser=True)
        project = Project.objects.create(slug="bench", name="Bench")
        Membership.objects.create(project=project, user=user, role=Role.ADMIN)
        account = account_create(
            project=project, actor=None, name="Sandbox AWS", access_key_id="bench",
            secret_access_key="bench", endpoint_url=url, sandbox=True,
        )  # fmt: skip
        workers = provisioning_workers(QUEUE)

        def lb_job(name: str) -> ProvisioningJob:
            config = InfraConfig(load_balancer=True, dns_name=f"app.{name}.example.com")
            return job_create(
                project=project, account=account, actor=user, name=name, config=config
            )

        def inline(name: str) -> float:
            # Its "next step" messages go to a queue no worker reads: this process runs it all.
            settings.ZOPDAY_PROVISIONING_QUEUE = f"{QUEUE}-unread"
            try:
                job = lb_job(name)
            finally:
                settings.ZOPDAY_PROVISIONING_QUEUE = QUEUE
            started = time.perf_counter()
            job = job_run_inline(job.pk)
            elapsed = time.perf_counter() - started
            assert job.status == JobStatus.READY, job.message
            return elapsed

        def through_celery(name: str) -> float:
            """From the job row's creation (job_create, then each step queued on commit and run
            by whichever worker takes it) to its finish, as the job itself records them."""
            job = lb_job(name)
            jobs_settled([job.pk])
            job.refresh_from_db()
            assert job.status == JobStatus.READY, job.message
            assert job.finished_at is not None
            return (job.finished_at - job.created_at).total_seconds()

        # Warm every path once (service models, clients, moto's lazy backends, both workers).
        clients = raw_clients(url)
        raw_script(clients, 0)
        inline("warm")
        for number in range(2):
            through_celery(f"warmc{number}")
        pipeline_times, celery_times, raw_times = [], [], []
        for n in range(1, args.runs + 1):
            raw_times.append(raw_script(clients, n))
            pipeline_times.append(inline(f"lb{n}"))
            celery_times.append(through_celery(f"lbc{n}"))
        pipeline = statistics.median(pipeline_times)
        celery = statistics.median(celery_times)
        raw = statistics.median(raw_times)
        print(
            f"Fixed + LB job (11 steps), median of {args.runs}: in one process "
            f"{pipeline * 1000:.0f} ms, through the Celery workers {celery * 1000:.0f} ms; "
            f"the raw boto3 calls for the same resources {raw * 1000:.0f} ms"
        )

        def concurrent(count: int, tag: str) -> tuple[float, int, list[float]]:
            """`count` Fixed jobs created at once: seconds until all settled, how many are
            ready, and each job's wall time (creation to finish, as the job records them)."""
            started = time.perf_counter()
            ids = [
                job_create(project=project, account=account, actor=user, name=f"{tag}{n}",
                           config=InfraConfig(instance_count=1)).pk
                for n in range(count)
            ]  # fmt: skip
            jobs_settled(ids)
            elapsed = time.perf_counter() - started
            jobs = ProvisioningJob.objects.filter(pk__in=ids, status=JobStatus.READY)
            walls = sorted((job.finished_at - job.created_at).total_seconds() for job in jobs)
            return elapsed, len(walls), walls

        def p99(walls: list[float]) -> float:
            return walls[max(0, math.ceil(0.99 * len(walls)) - 1)] if walls else float("nan")

        elapsed, ready, _ = concurrent(args.jobs, "c")
        print(f"{args.jobs} concurrent Fixed jobs (7 steps) on 2 workers: {elapsed:.1f} s, "
              f"{ready} ready")  # fmt: skip
        growth = {}
        for size in SIZES:
            took, done, walls = concurrent(size, f"g{size}-")
            growth[size] = (done / took * 60, p99(walls), statistics.median(walls))
            rate, slowest, middle = growth[size]
            print(f"{size:>4} concurrent Fixed jobs on 2 workers: {took:.1f} s, {done} ready, "
                  f"{rate:.1f} jobs/min, a job's wall time p50 {middle * 1000:.0f} ms, "
                  f"p99 {slowest * 1000:.0f} ms")  # fmt: skip
        print(f"figure: pipeline_fixed_lb_job = {pipeline * 1000:.0f} ms")
        print(f"figure: pipeline_fixed_lb_job_via_celery = {celery * 1000:.0f} ms")
        print(f"figure: raw_boto3_same_resources = {raw * 1000:.0f} ms")
        print(f"figure: pipeline_to_raw_ratio = {pipeline / raw:.2f} x")
        print(f"figure: pipeline_via_celery_to_raw_ratio = {celery / raw:.2f} x")
        print(
            f"figure: jobs_per_minute_20_concurrent_2_workers = {ready / elapsed * 60:.1f} jobs/min"
        )
        for size in SIZES:
            rate, slowest, _ = growth[size]
            print(f"figure: jobs_per_minute_{size}_concurrent = {rate:.1f} jobs/min")
            print(f"figure: job_wall_time_p99_{size}_concurrent = "
                  f"{slowest * 1000:.0f} ms")  # fmt: skip
    finally:
        for process in [*workers, moto, redis]:
            process.terminate()
            process.wait(timeout=15)


if __name__ == "__main__":
    main()
