"""The pipeline on real Celery workers (real Redis, the test database, moto over HTTP)."""

import os
import time

import pytest
from django.utils import timezone

from provisioning.choices import JobStatus, StepStatus
from provisioning.infra import InfraConfig
from provisioning.models import ProvisioningJob
from provisioning.pipeline import jobs_resume_stalled
from provisioning.services.accounts import account_create
from provisioning.services.jobs import job_create, job_teardown
from tests.provisioning.moto import raw_client, tagged_resources
from tests.provisioning.proxy import SlowProxy
from tests.services import start_celery_worker_on, stop

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# Fast retries in the workers too; a short lease so a dead worker's step is taken over soon.
WORKER_ENV = {
    "ZOPDAY_PROVISIONING_RETRY_BASE_SECONDS": "0.05",
    "ZOPDAY_PROVISIONING_POLL_SECONDS": "0.1",
    "ZOPDAY_PROVISIONING_LEASE_SECONDS": "2",
}


@pytest.fixture
def queue(settings):
    """A queue of this test's own, so no other worker of the session takes its steps."""
    name = f"provisioning-test-{os.getpid()}-{time.monotonic_ns()}"
    settings.ZOPDAY_PROVISIONING_QUEUE = name
    return name


@pytest.fixture
def worker_env(queue):
    return {**WORKER_ENV, "ZOPDAY_PROVISIONING_QUEUE": queue}


def wait_for(predicate, seconds=90, what="the job"):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def start_job(project, owner, endpoint, name="wk", **choices):
    account = account_create(
        project=project, actor=None, name=f"Sandbox {time.monotonic_ns()}",
        access_key_id="testing", secret_access_key="testing", endpoint_url=endpoint,
    )  # fmt: skip
    return job_create(
        project=project, account=account, actor=owner, name=name, config=InfraConfig(**choices)
    )


def settled(job_id):
    return ProvisioningJob.objects.get(pk=job_id).status not in (
        JobStatus.PENDING, JobStatus.PROVISIONING, JobStatus.TEARING_DOWN, JobStatus.UPDATING,
    )  # fmt: skip


def test_a_real_worker_runs_the_pipeline_to_ready(
    aws, project, owner, queue, worker_env, tmp_path, django_db_setup
):
    worker = start_celery_worker_on(tmp_path / "worker.log", queue, worker_env)
    try:
        job = start_job(project, owner, aws, load_balancer=True)
        wait_for(lambda: settled(job.pk))
    finally:
        stop(worker)
    job.refresh_from_db()
    assert job.status == JobStatus.READY, job.message
    assert list(job.steps.values_list("status", flat=True)) == [StepStatus.SUCCEEDED] * 11


def test_a_worker_killed_mid_step_is_replaced_and_nothing_is_duplicated(
    aws, project, owner, queue, worker_env, tmp_path, django_db_setup
):
    proxy = SlowProxy(aws, hold=b"Action=RunInstances", seconds=3)
    first = start_celery_worker_on(tmp_path / "first.log", queue, worker_env)
    second = None
    try:
        job = start_job(project, owner, proxy.url, instance_count=2)
        assert proxy.held.wait(60), "the worker never reached RunInstances"
        step = job.steps.get(name="stepCreateVMs")
        assert step.status == StepStatus.RUNNING
        first.kill()  # SIGKILL, in the middle of RunInstances
        first.wait()
        assert proxy.forwarded.wait(10)  # the cloud did launch them: the nasty case
        second = start_celery_worker_on(tmp_path / "second.log", queue, worker_env)
        wait_for(
            lambda: job.steps.get(name="stepCreateVMs").lease_until < timezone.now(),
            10,
            "the lease",
        )
        assert job.pk in jobs_resume_stalled()
        wait_for(lambda: settled(job.pk))
    finally:
        first.kill()
        if second is not None:
            stop(second)
        proxy.close()
    job.refresh_from_db()
    assert job.status == JobStatus.READY, job.message
    assert job.steps.get(name="stepCreateVMs").attempts == 2
    counts = tagged_resources(aws, job.token)
    assert counts["instances"] == 2 and counts["vpcs"] == 1 and counts["nat_gateways"] == 1
    assert len(job.config["vms"]) == 2


def test_a_job_killed_mid_step_and_torn_down_leaves_another_jobs_resources_alone(
    aws, project, owner, queue, worker_env, tmp_path, django_db_setup
):
    """moto ignores DescribeNatGateways' tag filter: a step run again after a kill must not
    adopt the other job's NAT gateway, nor its teardown delete everything listed."""
    proxy = SlowProxy(aws, hold=b"Action=CreateNatGateway", seconds=3)
    first = start_celery_worker_on(tmp_path / "first.log", queue, worker_env)
    second = None
    try:
        other = start_job(project, owner, aws, name="other", load_balancer=True)
        wait_for(lambda: settled(other.pk))
        other.refresh_from_db()
        assert other.status == JobStatus.READY, other.message
        others = tagged_resources(aws, other.token)
        job = start_job(project, owner, proxy.url, load_balancer=True)
        assert proxy.held.wait(60), "the worker never reached CreateNatGateway"
        first.kill()  # SIGKILL, in the middle of CreateNatGateway
        first.wait()
        assert proxy.forwarded.wait(10)
        second = start_celery_worker_on(tmp_path / "second.log", queue, worker_env)
        wait_for(
            lambda: job.steps.get(name="stepCreateNetwork").lease_until < timezone.now(),
            10,
            "the lease",
        )
        assert job.pk in jobs_resume_stalled()
        wait_for(lambda: settled(job.pk))
        job.refresh_from_db()
        assert job.status == JobStatus.READY, job.message
        ec2 = raw_client(aws, "ec2")
        [nat] = ec2.describe_nat_gateways(NatGatewayIds=[job.config["resources"]["nat_gateway"]])[
            "NatGateways"
        ]
        assert {"Key": "zopday:token", "Value": job.token} in nat["Tags"]
        job_teardown(job=job, actor=owner)
        wait_for(lambda: settled(job.pk))
    finally:
        first.kill()
        if second is not None:
            stop(second)
        proxy.close()
    job.refresh_from_db()
    assert job.status == JobStatus.DELETED, job.message
    assert tagged_resources(aws, job.token) == {}
    assert tagged_resources(aws, other.token) == others
