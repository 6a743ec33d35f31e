"""API clients for the shared users, authenticated with personal tokens as scripts would be."""

import pytest
from django.test import Client

from instances.services.instances import instance_create
from tests.factories import ImageFactory, instance_request
from tests.instances.api.helpers import Api


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
