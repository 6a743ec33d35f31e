"""Provisioning tests run against a real moto server on loopback (real HTTP, real boto3), and
GCP's against the local Compute Engine fake of tests/fakes (real HTTP, real google-cloud-compute)."""

import json
import os

import pytest

from provisioning.clouds.gcp.sdk import forget_clients as forget_gcp_clients
from provisioning.infra import InfraConfig
from provisioning.services.accounts import account_create
from provisioning.services.jobs import job_create
from tests.fakes.gce import service_account_key
from tests.services import start_celery_worker_on, stop


@pytest.fixture
def account(aws, project):
    return account_create(
        project=project, actor=None, name="Sandbox AWS", access_key_id="testing",
        secret_access_key="testing", endpoint_url=aws, sandbox=True,
    )  # fmt: skip


@pytest.fixture
def make_job(project, account, owner):
    def make(name: str = "web", **choices) -> object:
        return job_create(
            project=project, account=account, actor=owner, name=name,
            config=InfraConfig(**choices),
        )  # fmt: skip

    return make


@pytest.fixture
def gcp(gce, settings):
    """A clean Compute Engine fake, fresh SDK clients, and a pipeline that does not wait long."""
    forget_gcp_clients()
    settings.ZOPDAY_PROVISIONING_RETRY_BASE_SECONDS = 0.01
    settings.ZOPDAY_PROVISIONING_POLL_SECONDS = 0.05
    settings.ZOPDAY_PROVISIONING_READY_TIMEOUT = 10
    yield gce
    forget_gcp_clients()


@pytest.fixture
def gcp_account(gcp, project):
    key = service_account_key(gcp, email="zopday@zopday-sandbox.iam.gserviceaccount.com")
    return account_create(
        project=project, actor=None, name="Sandbox GCP", provider="gcp",
        default_region="us-central1", service_account_key=json.dumps(key), endpoint_url=gcp.url,
    )  # fmt: skip


@pytest.fixture
def make_gcp_job(project, gcp_account, owner):
    def make(name: str = "web", **choices) -> object:
        choices = {"region": "us-central1", "instance_type": "e2-small",
                   "exec_mode": "OSConfig", **choices}  # fmt: skip
        return job_create(
            project=project, account=gcp_account, actor=owner, name=name,
            config=InfraConfig(provider="gcp", **choices),
        )  # fmt: skip

    return make


@pytest.fixture(scope="module")
def cloud_worker(django_db_setup, tmp_path_factory, request):
    """A real Celery worker with a queue of the test module's own for the pipeline and cloud
    power operations, so that no other worker of the session takes them; yields the queue."""
    queue = f"{request.module.__name__.rsplit('.', 1)[-1]}-{os.getpid()}"
    environment = {
        "ZOPDAY_PROVISIONING_QUEUE": queue,
        "ZOPDAY_CLOUD_QUEUE": queue,
        "ZOPDAY_PROVISIONING_RETRY_BASE_SECONDS": "0.05",
        "ZOPDAY_PROVISIONING_POLL_SECONDS": "0.1",
        "ZOPDAY_PROVISIONING_READY_TIMEOUT": "30",
    }
    process = start_celery_worker_on(
        tmp_path_factory.mktemp("cloud-worker") / "worker.log", queue, environment
    )
    yield queue
    stop(process)


@pytest.fixture
def cloud_queue(cloud_worker, settings):
    """This test queues its pipeline and power operations for the module's worker."""
    settings.ZOPDAY_PROVISIONING_QUEUE = cloud_worker
    settings.ZOPDAY_CLOUD_QUEUE = cloud_worker
    return cloud_worker
