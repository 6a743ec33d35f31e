"""Provisioning tests run against a real moto server on loopback (real HTTP, real boto3), and
GCP's against the local Compute Engine fake of tests/fakes (real HTTP, real google-cloud-compute)."""

import json

import pytest

from provisioning.infra import InfraConfig
from provisioning.providers.aws import forget_clients
from provisioning.providers.gcp_sdk import forget_clients as forget_gcp_clients
from provisioning.services.accounts import account_create
from provisioning.services.jobs import job_create
from tests.fakes.gce import service_account_key
from tests.provisioning import moto
from tests.services import stop


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory):
    process, url = moto.start_moto(tmp_path_factory.mktemp("moto") / "moto.log")
    yield url
    stop(process)  # SIGKILL if it is still serving 15 s after SIGTERM


@pytest.fixture
def aws(moto_server, settings):
    """A clean moto, fresh SDK clients, and a pipeline that does not wait long."""
    moto.reset(moto_server)
    forget_clients()
    settings.ZOPDAY_PROVISIONING_RETRY_BASE_SECONDS = 0.01
    settings.ZOPDAY_PROVISIONING_POLL_SECONDS = 0.05
    settings.ZOPDAY_PROVISIONING_READY_TIMEOUT = 10
    yield moto_server
    forget_clients()


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
