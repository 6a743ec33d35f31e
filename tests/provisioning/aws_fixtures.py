"""Fixtures of the AWS doubles, for every test folder (provisioning, the browser tests): a
real moto server on loopback, and the Session Manager fake in front of it."""

import pytest

from provisioning.clouds.aws.sdk import forget_clients
from provisioning.services.accounts import account_create
from tests.fakes.ssm import SsmFake
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


@pytest.fixture(scope="session")
def ssm_fake(moto_server, tmp_path_factory):
    fake = SsmFake(upstream=moto_server, folder=tmp_path_factory.mktemp("ssm")).start()
    yield fake
    fake.stop()


@pytest.fixture
def ssm(aws, ssm_fake):
    """The Session Manager fake in front of a clean moto; its knobs and sessions reset after."""
    yield ssm_fake
    ssm_fake.reset()


@pytest.fixture
def ssm_account(ssm, project):
    """A sandbox AWS account whose endpoint is the fake: sessions there, the rest at moto."""
    return account_create(
        project=project, actor=None, name="Sandbox AWS", access_key_id="testing",
        secret_access_key="testing", endpoint_url=ssm.url, sandbox=True,
    )  # fmt: skip
