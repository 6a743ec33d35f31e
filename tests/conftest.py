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

pytest_plugins = [
    "tests.fakes.fixtures",
    "tests.fakes.kubevirt.fixtures",
    "tests.oci_registry",
    "tests.provisioning.aws_fixtures",
]
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


def set_for_the_session(**values: object) -> None:
    """Settings a session fixture sets, below any override the current test has made (its
    `settings` changes, undone when it ends), so that they outlive the test that made them."""
    from django.conf import UserSettingsHolder, settings

    base = settings._wrapped
    while isinstance(base, UserSettingsHolder):
        base = base.default_settings
    for name, value in values.items():
        setattr(base, name, value)
        settings.__dict__.pop(name, None)  # LazySettings keeps what it read


@pytest.fixture(scope="session", autouse=True)
def imports_from_loopback():
    """The tests serve images for URL imports on loopback, which the console refuses to fetch
    from by default: this run's processes (and the workers it starts) allow it."""
    from django.conf import settings

    allowed = [
        network
        for network in settings.ZOPDAY_EGRESS_BLOCKED_NETWORKS
        if network not in ("127.0.0.0/8", "::1/128")
    ]
    os.environ["ZOPDAY_EGRESS_BLOCKED_NETWORKS"] = ",".join(allowed)
    set_for_the_session(ZOPDAY_EGRESS_BLOCKED_NETWORKS=allowed)


@pytest.fixture(scope="session", autouse=True)
def git_sources_from_loopback(tmp_path_factory):
    """Git sources may fetch the repositories the tests make (file://, git daemon, HTTP on
    loopback) into a folder of this run: for this process and the workers it starts."""
    schemes = ["https", "ssh", "http", "git", "file"]
    folder = tmp_path_factory.mktemp("gitops")
    os.environ["ZOPDAY_GITOPS_URL_SCHEMES"] = ",".join(schemes)
    os.environ["ZOPDAY_GITOPS_DIR"] = str(folder)
    set_for_the_session(ZOPDAY_GITOPS_URL_SCHEMES=schemes, ZOPDAY_GITOPS_DIR=folder)


@pytest.fixture(scope="session")
def machines_root():
    """A short private folder for machine run folders, and a private network namespace, for
    this test run and its worker; every machine left running is stopped at the end."""
    from instances.backends import backend_named

    root = Path(tempfile.mkdtemp(prefix="zq", dir="/tmp"))
    netns = f"zt{os.getpid()}"
    os.environ["ZOPDAY_MACHINES_DIR"], os.environ["ZOPDAY_NETNS"] = str(root), netns
    set_for_the_session(ZOPDAY_MACHINES_DIR=root, ZOPDAY_NETNS=netns)
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
    """A real Celery worker on the real Redis, reading the test database, and one for this host's
    URL imports; clusters import images from the live server (ZOPDAY_PUBLIC_URL)."""
    from django.conf import settings

    from tests.services import start_celery_worker, start_celery_worker_on, stop

    os.environ["ZOPDAY_PUBLIC_URL"] = live_server.url
    logs = tmp_path_factory.mktemp("worker")
    process = start_celery_worker(logs / "worker.log")
    imports = start_celery_worker_on(logs / "imports.log", f"imports.{settings.ZOPDAY_HOST}")
    yield process
    stop(imports)
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


@pytest.fixture
def image_server():
    """A threaded HTTP server on loopback serving image files, slow or broken on demand
    (tests.image_server)."""
    from tests.image_server import ImageServer

    server = ImageServer()
    yield server
    server.stop()


@pytest.fixture
def import_host(django_db_setup, machines_root, tmp_path, settings):
    """This test's own host (tests.services.HostOfImports): a real worker on its queue keeps
    images in the test's folder; URL imports and instances created meanwhile go to it."""
    from tests.services import HostOfImports

    host = HostOfImports(tmp_path)
    settings.ZOPDAY_HOST, settings.ZOPDAY_IMAGES_DIR = host.name, host.images
    host.start()
    yield host
    host.stop()
