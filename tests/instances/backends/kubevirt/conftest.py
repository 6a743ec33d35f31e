"""The KubeVirt fake's API server, and `kubernetes` clients signed in to it."""

from collections.abc import Iterator

import pytest
from kubernetes import client

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
