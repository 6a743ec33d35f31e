"""The periodic refresh of provisioned cloud VMs (provisioning.refresh_vms) at 10, 100 and 1,000
VMs, on moto and on the Compute Engine fake, next to the per-job refresh it replaced.

One real Fixed job of 10 VMs is run on each cloud; the rest are copies of it (10 VMs a job,
their VMs made with run_instances on moto, written straight into the fake's store on GCP).
At each size, medians of N rounds: a round with nothing changed, a round with 3 VMs stopped
outside the console; the cloud API calls of a round; and, as the baseline measured in the same
run, the same round made job by job (one DescribeInstances per job on AWS, one read per VM on
GCP, as before the refresh batched).

    python benchmarks/cloud_refresh.py [--sizes 10,100,1000] [--runs 3]
"""

import argparse
import copy
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
WORK = Path(tempfile.mkdtemp(prefix="zr", dir="/tmp"))
os.environ.update(
    ZOPDAY_RUN_DIR=str(WORK / "run"),
    REDIS_URL=f"redis+socket://{WORK / 'redis.sock'}",
    DJANGO_SETTINGS_MODULE="zopday.settings",
    ZOPDAY_LOG_LEVEL="WARNING",
    ZOPDAY_PROVISIONING_QUEUE="provisioning-bench-unread",  # this process runs every step
    ZOPDAY_PROVISIONING_POLL_SECONDS="0.05",
    ZOPDAY_DEBUG="false",
)
os.environ.pop("DATABASE_URL", None)

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402

from instances.choices import Role  # noqa: E402
from instances.models import Instance, Membership, Project  # noqa: E402
from provisioning.choices import JobStatus  # noqa: E402
from provisioning.clouds.aws.sdk import client_for  # noqa: E402
from provisioning.clouds.gcp import power as gcp_power  # noqa: E402
from provisioning.infra import InfraConfig  # noqa: E402
from provisioning.models import ProvisioningJob  # noqa: E402
from provisioning.pipeline import job_run_inline  # noqa: E402
from provisioning.services.accounts import account_create  # noqa: E402
from provisioning.services.jobs import job_create  # noqa: E402
from provisioning.services.vms import job_vms_refresh, jobs_refresh_vms  # noqa: E402
from tests.fakes.gce import FakeGce, Machine, new_id, service_account_key  # noqa: E402

VENV_BIN = Path(sys.executable).parent
PER_JOB = 10
CHANGED = 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clone_job(template: ProvisioningJob, number: int, ids: list[str]) -> None:
    """A copy of the landed template job whose VMs are `ids`, with instance rows of their own."""
    config = InfraConfig.from_json(template.config)
    job = ProvisioningJob.objects.get(pk=template.pk)
    job.pk, job.name = None, f"bulk{template.provider}{number}"
    job.token = f"{template.provider}{number:09d}"
    for position, (vm, instance_id) in enumerate(zip(config.vms, ids, strict=True), start=1):
        instance = Instance.objects.get(pk=vm.console_instance_id)
        instance.pk, instance.name = None, f"bulk{number}-{template.provider}-{position}"
        instance.save()
        vm.instance_id, vm.console_instance_id = instance_id, instance.pk
    job.config = config.to_json()
    job.save()


def timed(work: Callable[[], Any]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


class Cloud:
    """What the measurement needs of one cloud: grow to a size, change VMs, count calls."""

    name = ""
    jobs: list[ProvisioningJob]

    def grow(self, vms: int) -> None: ...
    def stop(self, ids: list[str]) -> None: ...
    def start(self, ids: list[str]) -> None: ...
    def calls(self) -> int: ...
    def per_job_round(self) -> None: ...


class Aws(Cloud):
    name = "aws"

    def __init__(self, template: ProvisioningJob, url: str) -> None:
        self.template, self.jobs = template, [template]
        self.ec2 = client_for(template.account, "ec2", template.region)
        self.count = 0
        self.ec2.meta.events.register("before-call.ec2.*", self._counted)
        vm = InfraConfig.from_json(template.config).vms[0]
        [reservation] = self.ec2.describe_instances(InstanceIds=[vm.instance_id])["Reservations"]
        self.launch = {key: reservation["Instances"][0][key] for key in ("ImageId", "InstanceType")}
        # The copies in a subnet of their own: the template's /24 holds too few addresses.
        vpc = self.ec2.create_vpc(CidrBlock="10.99.0.0/16")["Vpc"]["VpcId"]
        subnet = self.ec2.create_subnet(VpcId=vpc, CidrBlock="10.99.0.0/16")["Subnet"]
        self.launch["SubnetId"] = subnet["SubnetId"]

    def _counted(self, **_: Any) -> None:
        self.count += 1

    def calls(self) -> int:
        return self.count

    def grow(self, vms: int) -> None:
        while len(self.jobs) * PER_JOB < vms:
            made = self.ec2.run_instances(MinCount=PER_JOB, MaxCount=PER_JOB, **self.launch)
            clone_job(self.template, len(self.jobs), [i["InstanceId"] for i in made["Instances"]])
            self.jobs = list(ProvisioningJob.objects.filter(provider="aws").order_by("pk"))

    def stop(self, ids: list[str]) -> None:
        self.ec2.stop_instances(InstanceIds=ids)

    def start(self, ids: list[str]) -> None:
        self.ec2.start_instances(InstanceIds=ids)

    def per_job_round(self) -> None:
        for job in ProvisioningJob.objects.filter(provider="aws").select_related("account"):
            job_vms_refresh(job=job)


class Gcp(Cloud):
    name = "gcp"

    def __init__(self, template: ProvisioningJob, fake: FakeGce) -> None:
        self.template, self.jobs, self.fake = template, [template], fake

    def calls(self) -> int:
        return sum(count for handler, count in self.fake.calls.items() if handler != "token")

    def _key(self, name: str) -> str:
        return next(key for key in self.fake.resources["instances"] if key.endswith(f"/{name}"))

    def grow(self, vms: int) -> None:
        fake = self.fake
        vms_of = InfraConfig.from_json(self.template.config).vms
        originals = [self._key(vm.instance_id) for vm in vms_of]
        while len(self.jobs) * PER_JOB < vms:
            names = []
            with fake.lock:
                for position, key in enumerate(originals, start=1):
                    name = f"bulk{len(self.jobs)}-vm-{position}"
                    new_key = f"{key.rsplit('/', 1)[0]}/{name}"
                    body = copy.deepcopy(fake.resources["instances"][key])
                    body.update(name=name, id=new_id(), selfLink=fake._link(new_key))
                    fake.resources["instances"][new_key] = body
                    fake.machines[new_key] = Machine()
                    names.append(name)
            clone_job(self.template, len(self.jobs), names)
            self.jobs = list(ProvisioningJob.objects.filter(provider="gcp").order_by("pk"))

    def _status(self, ids: list[str], status: str) -> None:
        with self.fake.lock:
            for name in ids:
                self.fake.resources["instances"][self._key(name)]["status"] = status

    def stop(self, ids: list[str]) -> None:
        self._status(ids, "TERMINATED")

    def start(self, ids: list[str]) -> None:
        self._status(ids, "RUNNING")

    def per_job_round(self) -> None:
        list_from, gcp_power.LIST_FROM = gcp_power.LIST_FROM, 10**9  # one read per VM, as before
        try:
            for job in ProvisioningJob.objects.filter(provider="gcp").select_related("account"):
                job_vms_refresh(job=job)
        finally:
            gcp_power.LIST_FROM = list_from


def all_due() -> None:
    ProvisioningJob.objects.update(vms_refreshed_at=None)


def measure(cloud: Cloud, size: int, runs: int) -> dict[str, float]:
    """Median seconds of a round (unchanged, 3 changed, job by job) and its API calls."""
    cloud.grow(size)
    ids = [InfraConfig.from_json(job.config).vms[0].instance_id for job in cloud.jobs]
    changed_ids = ids[:: max(1, len(ids) // CHANGED)][:CHANGED]
    all_due()
    jobs_refresh_vms()  # warm
    unchanged, changed, per_job = [], [], []
    calls = per_job_calls = 0
    for _ in range(runs):
        all_due()
        before = cloud.calls()
        unchanged.append(timed(jobs_refresh_vms))
        calls = cloud.calls() - before
        cloud.stop(changed_ids)
        all_due()
        changed.append(timed(jobs_refresh_vms))
        cloud.start(changed_ids)
        all_due()
        jobs_refresh_vms()  # settled again, untimed
        before = cloud.calls()
        per_job.append(timed(cloud.per_job_round))
        per_job_calls = cloud.calls() - before
    return {
        "unchanged": statistics.median(unchanged), "changed": statistics.median(changed),
        "per_job": statistics.median(per_job), "calls": calls, "per_job_calls": per_job_calls,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    call_command("migrate", verbosity=0)
    redis = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", str(WORK / "redis.sock"), "--save", "",
         "--appendonly", "no"], stdout=subprocess.DEVNULL,
    )  # fmt: skip
    port = free_port()
    moto = subprocess.Popen(
        [str(VENV_BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=(WORK / "moto.log").open("w"), stderr=subprocess.STDOUT,
        env={**os.environ, "MOTO_IAM_LOAD_MANAGED_POLICIES": "true"},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    fake = FakeGce(project="zopday-sandbox")
    fake.configure(step_seconds=0, bootstrap_seconds=0, instance_quota=100_000)
    try:
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.create_user("bench", is_superuser=True)
        project = Project.objects.create(slug="bench", name="Bench")
        Membership.objects.create(project=project, user=user, role=Role.ADMIN)
        aws_account = account_create(
            project=project, actor=None, name="Sandbox AWS", access_key_id="bench",
            secret_access_key="bench", endpoint_url=url, sandbox=True,
        )  # fmt: skip
        gcp_account = account_create(
            project=project, actor=None, name="Sandbox GCP", provider="gcp",
            default_region="us-central1", endpoint_url=fake.url,
            service_account_key=json.dumps(service_account_key(fake)),
        )  # fmt: skip

        def landed(name: str, account: Any, **choices: Any) -> ProvisioningJob:
            job = job_create(project=project, account=account, actor=user, name=name,
                             config=InfraConfig(instance_count=PER_JOB, **choices))  # fmt: skip
            job = job_run_inline(job.pk)
            assert job.status == JobStatus.READY, job.message
            return ProvisioningJob.objects.select_related("account").get(pk=job.pk)

        clouds: list[Cloud] = [
            Aws(landed("tplaws", aws_account), url),
            Gcp(landed("tplgcp", gcp_account, provider="gcp", region="us-central1",
                       instance_type="e2-small", exec_mode="OSConfig"), fake),
        ]  # fmt: skip
        # Only one cloud's jobs are due at a time: the other's are parked as Deleted.
        results: dict[tuple[str, int], dict[str, float]] = {}
        for cloud in clouds:
            ProvisioningJob.objects.exclude(provider=cloud.name).update(status=JobStatus.DELETED)
            ProvisioningJob.objects.filter(provider=cloud.name).update(status=JobStatus.READY)
            for size in sizes:
                found = results[cloud.name, size] = measure(cloud, size, args.runs)
                print(
                    f"{cloud.name} {size:>5} VMs ({size // PER_JOB} jobs): a round "
                    f"{found['unchanged'] * 1000:.1f} ms unchanged, "
                    f"{found['changed'] * 1000:.1f} ms with {CHANGED} stopped, "
                    f"{found['calls']:.0f} API calls; job by job "
                    f"{found['per_job'] * 1000:.1f} ms, {found['per_job_calls']:.0f} calls"
                )
        small, large = sizes[0], sizes[-1]
        for cloud in clouds:
            prefix = "cloud_refresh" if cloud.name == "aws" else "gcp_cloud_refresh"
            for size in sizes:
                found = results[cloud.name, size]
                print(f"figure: {prefix}_round_{size}_vms = {found['unchanged'] * 1000:.1f} ms")
                print(f"figure: {prefix}_round_{size}_vms_{CHANGED}_changed = "
                      f"{found['changed'] * 1000:.1f} ms")  # fmt: skip
                print(f"figure: {prefix}_api_calls_{size}_vms = {found['calls']:.0f} calls")
            top, bottom = results[cloud.name, large], results[cloud.name, small]
            print(f"figure: {prefix}_{large}_vs_{small} = "
                  f"{top['unchanged'] / bottom['unchanged']:.2f} x")  # fmt: skip
            print(f"figure: {prefix}_{large}_vms_vs_job_by_job = "
                  f"{top['unchanged'] / top['per_job']:.2f} x")  # fmt: skip
            print(f"figure: {prefix}_job_by_job_api_calls_{large}_vms = "
                  f"{top['per_job_calls']:.0f} calls")  # fmt: skip
    finally:
        fake.stop()
        for process in (moto, redis):
            process.terminate()
            process.wait(timeout=15)


if __name__ == "__main__":
    main()
