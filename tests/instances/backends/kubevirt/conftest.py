"""The fake's objects through the `kubernetes` client."""

import pytest
from kubernetes import client

from tests.fakes.kubevirt.fixtures import api_client
from tests.fakes.kubevirt.server import FakeApiServer


@pytest.fixture
def custom(kube_api: FakeApiServer) -> client.CustomObjectsApi:
    """KubeVirt's objects through CustomObjectsApi, in a namespace `zop-p1` made for them."""
    api = api_client(kube_api)
    client.CoreV1Api(api).create_namespace({"metadata": {"name": "zop-p1"}})
    return client.CustomObjectsApi(api)
