"""The GCP pipeline against the local Compute Engine fake, next to plain google-cloud-compute
doing the same work.

Prints, in one run, on a fresh SQLite database, a private Redis and the fake of
tests/fakes/gce.py in a process of its own (operations settle at once, the VM's bootstrap reports
ready as soon as it runs): the wall time of a Fixed + LB job (11 steps, one VM, a DNS name), run
in this process and through 2 real Celery workers (benchmarks/stack.py starts them as for
pipeline.py), next to a plain script making the same resources with the same SDK (each operation
waited for, its clients built beforehand as the pipeline's are cached; no checks, logs or
bookkeeping). Medians of N runs, the three interleaved.

    python benchmarks/pipeline_gcp.py [--runs 5]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

QUEUE = "provisioning-bench"
os.environ.update(
    ZOPDAY_PROVISIONING_QUEUE=QUEUE,
    ZOPDAY_PROVISIONING_POLL_SECONDS="0.05",
    ZOPDAY_PROVISIONING_RETRY_BASE_SECONDS="0.05",
)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from django.core.management import call_command  # noqa: E402
from google.api_core.client_options import ClientOptions  # noqa: E402
from google.auth.transport.requests import AuthorizedSession  # noqa: E402
from google.cloud import compute_v1  # noqa: E402
from google.oauth2 import service_account  # noqa: E402
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
from tests.fakes.gce import service_account_key  # noqa: E402

PROJECT = "zopday-sandbox"
REGION, ZONE = "us-central1", "us-central1-a"
POLL = 0.05


class Raw:
    """Plain SDK calls: one client per service, operations waited for with the operations
    clients (not ExtendedOperation.result(), whose poller ignores a custom endpoint)."""

    def __init__(self, fake: SimpleNamespace) -> None:
        credentials = service_account.Credentials.from_service_account_info(
            service_account_key(fake),  # type: ignore[arg-type]
            scopes=["https://www.googleapis.com/auth/cloud-platform"],
        )
        options = ClientOptions(api_endpoint=fake.url)
        self.c: dict[str, Any] = {
            name: getattr(compute_v1, f"{name}Client")(
                credentials=credentials, client_options=options
            )
            for name in (
                "Networks", "Subnetworks", "Routers", "Firewalls", "InstanceTemplates",
                "Instances", "GlobalAddresses", "HealthChecks", "InstanceGroups",
                "BackendServices", "UrlMaps", "TargetHttpProxies", "GlobalForwardingRules",
                "ZoneOperations", "RegionOperations", "GlobalOperations",
            )
        }  # fmt: skip
        self.session = AuthorizedSession(credentials)
        self.url = fake.url

    def done(self, operation: Any) -> None:
        while operation.status != compute_v1.Operation.Status.DONE:
            if operation.zone:
                operation = self.c["ZoneOperations"].wait(
                    project=PROJECT, zone=ZONE, operation=operation.name
                )
            elif operation.region:
                operation = self.c["RegionOperations"].wait(
                    project=PROJECT, region=REGION, operation=operation.name
                )
            else:
                operation = self.c["GlobalOperations"].wait(
                    project=PROJECT, operation=operation.name
                )
        assert not operation.error.errors, operation.error

    def run(self, n: int, image: str) -> float:
        """Everything a Fixed + LB job with one VM and a DNS name makes; seconds taken."""
        c, p, name = self.c, PROJECT, f"raw{n}"
        link = f"projects/{p}/global"
        config = InfraConfig(provider="gcp", load_balancer=True)
        started = time.perf_counter()
        self.done(
            c["Networks"].insert_unary(
                project=p,
                network_resource=compute_v1.Network(
                    name=f"{name}-net", auto_create_subnetworks=False
                ),
            )
        )
        network = f"{link}/networks/{name}-net"
        self.done(
            c["Subnetworks"].insert_unary(
                project=p,
                region=REGION,
                subnetwork_resource=compute_v1.Subnetwork(
                    name=f"{name}-subnet",
                    network=network,
                    ip_cidr_range="10.42.0.0/24",
                    private_ip_google_access=True,
                ),
            )
        )
        self.done(
            c["Routers"].insert_unary(
                project=p,
                region=REGION,
                router_resource=compute_v1.Router(
                    name=f"{name}-router",
                    network=network,
                    nats=[
                        compute_v1.RouterNat(
                            name=f"{name}-nat",
                            nat_ip_allocate_option="AUTO_ONLY",
                            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
                        )
                    ],
                ),
            )
        )
        email = self.session.post(
            f"{self.url}/v1/projects/{p}/serviceAccounts",
            json={"accountId": f"{name}-vms-sa", "serviceAccount": {"displayName": name}},
        ).json()["email"]
        for rule, extra in (
            (
                "deny-in",
                {
                    "denied": [compute_v1.Denied(I_p_protocol="all")],
                    "source_ranges": ["0.0.0.0/0"],
                    "priority": 1000,
                },
            ),
            (
                "iap-ssh",
                {
                    "allowed": [compute_v1.Allowed(I_p_protocol="tcp", ports=["22"])],
                    "source_ranges": ["35.235.240.0/20"],
                    "priority": 900,
                },
            ),
        ):
            self.done(
                c["Firewalls"].insert_unary(
                    project=p,
                    firewall_resource=compute_v1.Firewall(
                        name=f"{name}-{rule}",
                        network=network,
                        direction="INGRESS",
                        target_tags=[name],
                        **extra,
                    ),
                )
            )
        self.done(
            c["InstanceTemplates"].insert_unary(
                project=p,
                instance_template_resource=compute_v1.InstanceTemplate(
                    name=f"{name}-tpl",
                    properties=compute_v1.InstanceProperties(
                        machine_type="e2-small",
                        tags=compute_v1.Tags(items=[name]),
                        disks=[
                            compute_v1.AttachedDisk(
                                boot=True,
                                auto_delete=True,
                                initialize_params=compute_v1.AttachedDiskInitializeParams(
                                    source_image=image, disk_size_gb=20
                                ),
                            )
                        ],
                        network_interfaces=[
                            compute_v1.NetworkInterface(
                                network=network,
                                subnetwork=f"projects/{p}/regions/{REGION}/subnetworks/{name}-subnet",
                            )
                        ],
                        service_accounts=[compute_v1.ServiceAccount(email=email)],
                        metadata=compute_v1.Metadata(
                            items=[
                                compute_v1.Items(key="user-data", value=user_data(config)),
                                compute_v1.Items(key="enable-guest-attributes", value="TRUE"),
                            ]
                        ),
                    ),
                ),
            )
        )
        vm = f"{name}-vm-1"
        self.done(
            c["Instances"].insert_unary(
                compute_v1.InsertInstanceRequest(
                    project=p,
                    zone=ZONE,
                    source_instance_template=f"{link}/instanceTemplates/{name}-tpl",
                    instance_resource=compute_v1.Instance(name=vm),
                )
            )
        )
        while True:  # the bootstrap's guest attribute
            try:
                c["Instances"].get_guest_attributes(
                    compute_v1.GetGuestAttributesInstanceRequest(
                        project=p, zone=ZONE, instance=vm, query_path="zopday/"
                    )
                )
                break
            except Exception:
                time.sleep(POLL)
        self.done(
            c["Firewalls"].insert_unary(
                project=p,
                firewall_resource=compute_v1.Firewall(
                    name=f"{name}-lb-in",
                    network=network,
                    direction="INGRESS",
                    priority=900,
                    source_ranges=["130.211.0.0/22", "35.191.0.0/16"],
                    target_tags=[name],
                    allowed=[compute_v1.Allowed(I_p_protocol="tcp", ports=["80"])],
                ),
            )
        )
        self.done(
            c["GlobalAddresses"].insert_unary(
                project=p, address_resource=compute_v1.Address(name=f"{name}-ip")
            )
        )
        address = c["GlobalAddresses"].get(project=p, address=f"{name}-ip").address
        self.done(
            c["HealthChecks"].insert_unary(
                project=p,
                health_check_resource=compute_v1.HealthCheck(
                    name=f"{name}-hc",
                    type_="HTTP",
                    http_health_check=compute_v1.HTTPHealthCheck(port=80, request_path="/healthz"),
                ),
            )
        )
        self.done(
            c["InstanceGroups"].insert_unary(
                project=p,
                zone=ZONE,
                instance_group_resource=compute_v1.InstanceGroup(
                    name=f"{name}-ig",
                    network=network,
                    named_ports=[compute_v1.NamedPort(name="http", port=80)],
                ),
            )
        )
        self.done(
            c["InstanceGroups"].add_instances_unary(
                project=p,
                zone=ZONE,
                instance_group=f"{name}-ig",
                instance_groups_add_instances_request_resource=(
                    compute_v1.InstanceGroupsAddInstancesRequest(
                        instances=[
                            compute_v1.InstanceReference(
                                instance=f"projects/{p}/zones/{ZONE}/instances/{vm}"
                            )
                        ]
                    )
                ),
            )
        )
        self.done(
            c["BackendServices"].insert_unary(
                project=p,
                backend_service_resource=compute_v1.BackendService(
                    name=f"{name}-bes",
                    protocol="HTTP",
                    port_name="http",
                    load_balancing_scheme="EXTERNAL_MANAGED",
                    health_checks=[f"{link}/healthChecks/{name}-hc"],
                    backends=[
                        compute_v1.Backend(
                            group=f"projects/{p}/zones/{ZONE}/instanceGroups/{name}-ig"
                        )
                    ],
                ),
            )
        )
        self.done(
            c["UrlMaps"].insert_unary(
                project=p,
                url_map_resource=compute_v1.UrlMap(
                    name=f"{name}-map", default_service=f"{link}/backendServices/{name}-bes"
                ),
            )
        )
        self.done(
            c["TargetHttpProxies"].insert_unary(
                project=p,
                target_http_proxy_resource=compute_v1.TargetHttpProxy(
                    name=f"{name}-proxy", url_map=f"{link}/urlMaps/{name}-map"
                ),
            )
        )
        self.done(
            c["GlobalForwardingRules"].insert_unary(
                project=p,
                forwarding_rule_resource=compute_v1.ForwardingRule(
                    name=f"{name}-fr",
                    I_p_address=address,
                    I_p_protocol="TCP",
                    port_range="80",
                    target=f"{link}/targetHttpProxies/{name}-proxy",
                    load_balancing_scheme="EXTERNAL_MANAGED",
                ),
            )
        )
        dns = f"{self.url}/dns/v1/projects/{p}/managedZones"
        self.session.post(
            dns,
            json={
                "name": f"{name}-zone",
                "dnsName": f"{name}.example.com.",
                "description": name,
                "visibility": "public",
            },
        )
        self.session.post(
            f"{dns}/{name}-zone/changes",
            json={
                "additions": [
                    {
                        "name": f"app.{name}.example.com.",
                        "type": "A",
                        "ttl": 300,
                        "rrdatas": [address],
                    }
                ]
            },
        )
        return time.perf_counter() - started  # fmt: skip


def start_fake() -> tuple[subprocess.Popen, SimpleNamespace]:
    """The Compute Engine fake in a process of its own, as moto is for pipeline.py: neither the
    plain script nor the job shares its interpreter with the server it calls."""
    fake = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.gce", "--project", PROJECT], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=(WORK / "gce.log").open("w"), text=True,
    )  # fmt: skip
    assert fake.stdout is not None
    url = fake.stdout.readline().strip()
    settings = {"step_seconds": 0, "bootstrap_seconds": 0, "instance_quota": 1000}
    request = urllib.request.Request(
        f"{url}/_fake/configure", data=json.dumps(settings).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    urllib.request.urlopen(request, timeout=10).read()
    return fake, SimpleNamespace(project=PROJECT, url=url)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    call_command("migrate", verbosity=0)
    redis = start_redis()
    server, fake = start_fake()
    workers: list[subprocess.Popen] = []
    try:
        from django.conf import settings
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.create_user("bench", is_superuser=True)
        project = Project.objects.create(slug="bench", name="Bench")
        Membership.objects.create(project=project, user=user, role=Role.ADMIN)
        account = account_create(
            project=project, actor=None, name="Sandbox GCP", provider="gcp",
            default_region=REGION, service_account_key=json.dumps(service_account_key(fake)),  # type: ignore[arg-type]
            endpoint_url=fake.url,
        )  # fmt: skip
        workers = provisioning_workers(QUEUE)

        def lb_job(name: str) -> ProvisioningJob:
            config = InfraConfig(
                provider="gcp", region=REGION, instance_type="e2-small", exec_mode="OSConfig",
                load_balancer=True, dns_name=f"app.{name}.example.com",
            )  # fmt: skip
            return job_create(project=project, account=account, actor=user, name=name,
                              config=config)  # fmt: skip

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
            """From the job row's creation (its steps run by whichever worker takes them) to its
            finish, as the job itself records them."""
            job = lb_job(name)
            jobs_settled([job.pk])
            job.refresh_from_db()
            assert job.status == JobStatus.READY, job.message
            assert job.finished_at is not None
            return (job.finished_at - job.created_at).total_seconds()

        raw = Raw(fake)
        image = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"
        raw.run(0, image)  # warm every path: clients, credentials, the fake's routes, workers
        inline("warm")
        for number in range(2):
            through_celery(f"warmc{number}")
        pipeline_times, celery_times, raw_times = [], [], []
        for n in range(1, args.runs + 1):
            raw_times.append(raw.run(n, image))
            pipeline_times.append(inline(f"lb{n}"))
            celery_times.append(through_celery(f"lbc{n}"))
        pipeline, celery = statistics.median(pipeline_times), statistics.median(celery_times)
        plain = statistics.median(raw_times)
        print(
            f"GCP Fixed + LB job (11 steps), median of {args.runs}: in one process "
            f"{pipeline * 1000:.0f} ms, through the Celery workers {celery * 1000:.0f} ms; the "
            f"raw google-cloud-compute calls for the same resources {plain * 1000:.0f} ms"
        )
        print(f"figure: gcp_pipeline_fixed_lb_job = {pipeline * 1000:.0f} ms")
        print(f"figure: gcp_pipeline_fixed_lb_job_via_celery = {celery * 1000:.0f} ms")
        print(f"figure: raw_google_cloud_compute_same_resources = {plain * 1000:.0f} ms")
        print(f"figure: gcp_pipeline_to_raw_ratio = {pipeline / plain:.2f} x")
        print(f"figure: gcp_pipeline_via_celery_to_raw_ratio = {celery / plain:.2f} x")
    finally:
        for process in [*workers, server, redis]:
            process.terminate()
            process.wait(timeout=15)


if __name__ == "__main__":
    main()
