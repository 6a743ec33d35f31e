"""instances/filters.py: the instance list's filters, as the page and the API read them."""

import pytest

from instances import selectors
from instances.choices import PowerState
from instances.filters import InstanceFilterSet
from instances.services.instances import instance_create
from tests.factories import SubnetFactory, instance_request

pytestmark = pytest.mark.django_db


@pytest.fixture
def two(project, operator, subnet):
    """web-1 on the subnet, db-1 on another one, both stopped."""
    other = SubnetFactory(project=project, name="front", cidr_v4="10.30.0.0/24")
    web = instance_create(project=project, actor=operator, request=instance_request(subnet))
    db = instance_create(
        project=project, actor=operator, request=instance_request(other, name="db-1")
    )
    return web, db


def names(query, project):
    return [i.name for i in InstanceFilterSet(query, selectors.instance_list(project)).qs]


def test_no_filter_lists_every_instance_by_name(project, two):
    assert names({}, project) == ["db-1", "web-1"]
    assert names({"state": "", "zone": "", "subnet": "", "q": ""}, project) == ["db-1", "web-1"]


def test_each_filter_narrows_the_list(project, subnet, two):
    assert names({"subnet": str(subnet.pk)}, project) == ["web-1"]
    assert names({"subnet": subnet.pk}, project) == ["web-1"]  # the API's validated id
    assert names({"q": " db "}, project) == ["db-1"]
    assert names({"state": PowerState.STOPPED}, project) == ["db-1", "web-1"]
    assert names({"state": "running"}, project) == []
    assert names({"zone": "local-1a", "q": "web"}, project) == ["web-1"]


def test_a_filter_it_cannot_read_matches_nothing(project, two):
    assert names({"subnet": "front"}, project) == []  # a name, not an id
    assert names({"state": "bogus"}, project) == []
    assert names({"zone": "local\x00"}, project) == []  # the form refuses NUL


def test_the_list_page_shows_no_instance_for_a_nul_in_its_filters(client_for, project, two):
    response = client_for("viewer").get(f"/projects/{project.slug}/instances/", {"q": "web\x00"})
    assert response.status_code == 200
    assert "No instance matches these filters." in response.text
