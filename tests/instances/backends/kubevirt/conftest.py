"""The KubeVirt fake's API server, and `kubernetes` clients signed in to it."""

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.fakes.kubevirt.controller import Controller
from tests.fakes.kubevirt.server import FakeApiServer, Subject

CONSOLE = "system:serviceaccount:zopday:console"


@pytest.fixture
def kube_api() -> Iterator[FakeApiServer]:
    fake = FakeApiServer(bookmark_seconds=0.1)
    fake.add_token("console-token", Subject(CONSOLE))
    yield fake
    fake.stop()


def api_client(fake: FakeApiServer, token: str = "console-token") -> client.ApiClient:
    configuration = client.Configuration(host=fake.url)
    configuration.api_key = {"authorization": token}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(configuration)


@pytest.fixture
def custom(kube_api: FakeApiServer) -> client.CustomObjectsApi:
    """KubeVirt's objects through CustomObjectsApi, in a namespace `zop-p1` made for them."""
    api = api_client(kube_api)
    client.CoreV1Api(api).create_namespace({"metadata": {"name": "zop-p1"}})
    return client.CustomObjectsApi(api)


REPO = Path(__file__).resolve().parents[4]
DEMO_IMAGE = REPO / "var" / "images" / "demo"
KERNEL_IMAGE = "registry.local/zopday/demo-kernel:1"


@pytest.fixture
def kubevirt(kube_api: FakeApiServer) -> Iterator[Controller]:
    """The fake with its controller: VMIs run as real QEMU guests of the demo image, on two
    nodes (zone-a, zone-b) whose backend folders live under a short /tmp path."""
    if not (DEMO_IMAGE / "vmlinuz").is_file():
        pytest.fail("the demo image is not built (bin/zop test builds it)")
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="zk"))
    controller = Controller(kube_api, root, registry={KERNEL_IMAGE: DEMO_IMAGE})
    yield controller
    controller.stop()
    shutil.rmtree(root, ignore_errors=True)
