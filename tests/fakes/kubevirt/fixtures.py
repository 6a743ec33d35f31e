"""pytest fixtures of the KubeVirt fake (its API server, its controller, the fake added as a
cluster and watched), and helpers for tests of instances on it."""

import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from kubernetes import client

from instances.backends.kubevirt.connection import USER_AGENT
from instances.models import Cluster, Instance
from instances.services.cluster_watch import ClusterWatch, watch_cluster
from instances.services.clusters import cluster_check
from tests import factories
from tests.factories import SubnetFactory
from tests.fakes.kubevirt import schemas
from tests.fakes.kubevirt.controller import Controller
from tests.fakes.kubevirt.server import FakeApiServer, Subject
from tests.fakes.kubevirt.store import BY_KIND

VMI = BY_KIND["VirtualMachineInstance"]

CONSOLE = "system:serviceaccount:zopday:console"


@pytest.fixture
def kube_api() -> Iterator[FakeApiServer]:
    """The fake's API server. After each test, every object and action body the console sent
    it must have validated against the vendored OpenAPI documents, with no field unknown."""
    fake = FakeApiServer(bookmark_seconds=0.1)
    fake.add_token("console-token", Subject(CONSOLE))
    yield fake
    fake.stop()
    assert not invalid_sent(fake)


def invalid_sent(fake: FakeApiServer) -> list[str]:
    """What the console sent that the documents do not take, or that they do not describe."""
    return [
        f"{sent.kind} {sent.body.get('metadata', {}).get('name', '')}: "
        f"{sent.verdict.causes or sent.verdict.unknown or 'no schema'}"
        for sent in fake.sent
        if sent.agent == USER_AGENT
        and (sent.verdict.causes or sent.verdict.unknown or schemas.validator(sent.kind) is None)
    ]


def api_client(fake: FakeApiServer, token: str = "console-token") -> client.ApiClient:
    configuration = client.Configuration(host=fake.url)
    configuration.api_key = {"authorization": token}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(configuration)


REPO = Path(__file__).resolve().parents[3]
DEMO_IMAGE = REPO / "var" / "images" / "demo"
KERNEL_IMAGE = "registry.local/zopday/demo-kernel:1"


@pytest.fixture
def kubevirt(kube_api: FakeApiServer, machines_root: Path) -> Iterator[Controller]:
    """The fake with its controller: VMIs run as real QEMU guests of the demo image, on three
    nodes (node-1 and node-3 in zone-a, node-2 in zone-b) whose backend folders live under a
    short /tmp path and share one disk folder, and whose Multus networks are bridges of the
    test run's own network namespace, one L2 segment across the nodes."""
    if not (DEMO_IMAGE / "vmlinuz").is_file():
        pytest.fail("the demo image is not built (bin/zop test builds it)")
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="zk"))
    controller = Controller(
        kube_api, root, registry={KERNEL_IMAGE: DEMO_IMAGE}, netns=settings.ZOPDAY_NETNS
    )
    yield controller
    controller.stop()
    shutil.rmtree(root, ignore_errors=True)


# ---- instances on the fake cluster ----------------------------------------------------------
BOOT_TIMEOUT = 180


@pytest.fixture
def cluster(kube_api, kubevirt) -> Cluster:
    """The fake, added as the cluster "lab" and checked as the admin's Save checks it."""
    cluster = Cluster(name="lab", api_url=kube_api.url, kernel_image=KERNEL_IMAGE)
    cluster.token = "console-token"
    cluster.save()
    assert cluster_check(cluster) == ""
    return cluster


@pytest.fixture
def watching(cluster, tmp_path) -> Iterator[ClusterWatch]:
    watcher = watch_cluster(cluster, tmp_path)
    yield watcher
    watcher.stop()


@pytest.fixture
def cluster_lan(project):
    """A subnet in the fake's zone-a."""
    return SubnetFactory(project=project, name="lan", zone="zone-a", cidr_v4="10.91.0.0/24",
                         gateway="10.91.0.1", dns_resolvers="")  # fmt: skip


def create(operator, lan, **fields) -> Instance:
    return factories.demo_instance(
        actor=operator, image=factories.demo_image(), subnet=lan, name="web", ip="10.91.0.10",
        cluster="lab", **fields,
    )  # fmt: skip


def wait_for_state(instance: Instance, state: str, timeout: float = BOOT_TIMEOUT) -> Instance:
    deadline = time.monotonic() + timeout
    while True:
        instance.refresh_from_db()
        if instance.power_state == state:
            return instance
        assert time.monotonic() < deadline, (
            f"{instance.name} never {state} (it is {instance.power_state}: "
            f"{instance.power_message})"
        )
        time.sleep(0.2)


def guest_of(kubevirt, instance: Instance):
    """The node's QEMU backend that runs the instance's VMI, and the machine's id there."""
    namespace = f"zop-{instance.project.slug}"
    vmi = kubevirt.store.find(VMI, namespace, instance.machine_id) or {}
    node = vmi.get("status", {}).get("nodeName", "node-1")  # node-1: the first of zone-a
    return kubevirt.node_backend(node), f"{namespace}-{instance.machine_id}"


def wait_for_prompt(kubevirt, instance: Instance, count: int = 1) -> None:
    node, machine = guest_of(kubevirt, instance)
    prompt = f"root@{instance.name}:/# ".encode()
    deadline = time.monotonic() + BOOT_TIMEOUT
    while True:
        log = node.serial_log(machine)
        if log.exists() and log.read_bytes().count(prompt) >= count:
            return
        assert time.monotonic() < deadline, f"never at the prompt of {instance.name}"
        time.sleep(0.2)


def type_on_serial(kubevirt, instance: Instance, text: str) -> None:
    node, machine = guest_of(kubevirt, instance)
    with socket.socket(socket.AF_UNIX) as console:
        console.connect(str(node.console_socket(machine, "serial")))
        console.sendall(text.encode())
        time.sleep(0.3)  # the UART drains before the socket closes
