"""Shared fixtures: a project with an owner (admin), an operator, a viewer and an outsider."""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from django.test import Client

from instances.choices import Role
from tests.factories import MembershipFactory, ProjectFactory, UserFactory

pytest_plugins = ["tests.fakes.fixtures", "tests.fakes.kubevirt.fixtures", "tests.oci_registry"]
ROLES = ("owner", "operator", "viewer", "outsider")


@pytest.fixture
def project():
    return ProjectFactory(slug="alpha", name="Alpha")


@pytest.fixture
def other_project():
    return ProjectFactory(slug="beta", name="Beta")


@pytest.fixture
def owner(project):
    return MembershipFactory(
        project=project, user=UserFactory(username="owner"), role=Role.ADMIN
    ).user


@pytest.fixture
def operator(project):
    return MembershipFactory(
        project=project, user=UserFactory(username="operator"), role=Role.OPERATOR
    ).user


@pytest.fixture
def viewer(project):
    return MembershipFactory(
        project=project, user=UserFactory(username="viewer"), role=Role.VIEWER
    ).user


@pytest.fixture
def outsider(other_project):
    """Admin of another project: powerful elsewhere, a stranger here."""
    return MembershipFactory(
        project=other_project, user=UserFactory(username="outsider"), role=Role.ADMIN
    ).user


@pytest.fixture
def client_for(request):
    """client_for("operator") → a test client logged in as that shared user."""

    def make(role: str) -> Client:
        user = request.getfixturevalue(role)
        client = Client()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def api_for(request):
    """api_for("operator") → an API client authenticated with a fresh token of that user."""
    from instances.services.tokens import api_token_create
    from tests.instances.api.helpers import Api

    def make(role: str) -> Api:
        _, plaintext = api_token_create(user=request.getfixturevalue(role), name="tests")
        return Api(Client(), {"Authorization": f"Bearer {plaintext}"})

    return make


@pytest.fixture(scope="session")
def machines_root():
    """A short private folder for machine run folders, and a private network namespace, for
    this test run and its worker; every machine left running is stopped at the end."""
    from django.conf import settings

    from instances.backends import backend_named

    root = Path(tempfile.mkdtemp(prefix="zq", dir="/tmp"))
    netns = f"zt{os.getpid()}"
    os.environ["ZOPDAY_MACHINES_DIR"], os.environ["ZOPDAY_NETNS"] = str(root), netns
    settings.ZOPDAY_MACHINES_DIR, settings.ZOPDAY_NETNS = root, netns
    backend_named.cache_clear()
    yield root
    backend = backend_named("qemu")
    for machine_id in backend.running_machines():
        backend.force_stop(machine_id)
    backend_named.cache_clear()
    subprocess.run(["ip", "netns", "delete", netns], capture_output=True)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, machines_root, tmp_path_factory, live_server):
    """A real Celery worker on the real Redis, reading the test database; clusters import
    images from the live server (ZOPDAY_PUBLIC_URL)."""
    from tests.services import start_celery_worker, stop

    os.environ["ZOPDAY_PUBLIC_URL"] = live_server.url
    process = start_celery_worker(tmp_path_factory.mktemp("worker") / "worker.log")
    yield process
    stop(process)


@pytest.fixture
def host_queue_of():
    """host_queue_of(instance) -> a queue of the real broker (tests.broker.BrokerQueue) that the
    instance's host tasks go to and no worker reads; it is removed at the end."""
    from tests.broker import own_host_queue

    queues = []

    def make(instance):  # type: ignore[no-untyped-def]
        queues.append(own_host_queue(instance))
        return queues[-1]

    yield make
    for queue in queues:
        queue.forget()


@pytest.fixture
def subnet(project):
    from tests.factories import SubnetFactory

    return SubnetFactory(
        project=project, name="backend", cidr_v4="10.20.0.0/24", gateway="10.20.0.1"
    )


@pytest.fixture
def running(project, operator, subnet):
    """An instance the database says runs (on no machine: no task acts on it)."""
    from instances.choices import PowerState
    from instances.models import Instance
    from instances.services.instances import instance_create
    from tests.factories import instance_request

    instance = instance_create(project=project, actor=operator, request=instance_request(subnet))
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.RUNNING)
    instance.power_state = PowerState.RUNNING
    return instance


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Tests create many users; the production hasher is slow on purpose."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
