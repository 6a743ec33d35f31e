"""API clients for the shared users, authenticated with personal tokens as scripts would be."""

import pytest
from django.test import Client

from instances.services.instances import instance_create
from instances.services.tokens import api_token_create
from tests.factories import ImageFactory, instance_request
from tests.instances.api.helpers import Api


@pytest.fixture
def api_for(request):
    """api_for("operator") → an Api authenticated with a fresh token of that shared user."""

    def make(role: str) -> Api:
        _, plaintext = api_token_create(user=request.getfixturevalue(role), name="tests")
        return Api(Client(), {"Authorization": f"Bearer {plaintext}"})

    return make


@pytest.fixture
def anonymous():
    return Api(Client())


@pytest.fixture
def image():
    """A shared image, usable by every project."""
    return ImageFactory(name="demo")


@pytest.fixture
def instance(project, operator, subnet, image):
    return instance_create(project=project, actor=operator, request=instance_request(subnet, image))
