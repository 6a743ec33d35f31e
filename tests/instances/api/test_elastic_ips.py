"""Elastic IPs through the API: allocate, associate, release."""

import pytest

from instances.models import ElasticIP
from instances.services.instances import instance_create
from tests.factories import SubnetFactory, instance_request
from tests.instances.api.helpers import errors_of

pytestmark = pytest.mark.django_db


def test_an_address_is_allocated_associated_and_released(api_for, operator, instance):
    api = api_for("operator")
    eip = api.post("/projects/alpha/elastic-ips").json()
    assert (eip["address"], eip["nic"]) == ("198.51.100.1", None)
    nic = instance.nics.get()
    associated = api.post(f"/projects/alpha/elastic-ips/{eip['id']}/associate", {"nic": nic.pk})
    assert (associated.status_code, associated.json()["nic"]) == (200, nic.pk)
    assert (
        api.get(f"/projects/alpha/instances/{instance.pk}/nics").json()[0]["elastic_ip"]
        == "198.51.100.1"
    )

    first = api.post(f"/projects/alpha/elastic-ips/{eip['id']}/release").json()
    assert first == {"address": "198.51.100.1", "outcome": "disassociated"}
    second = api.post(f"/projects/alpha/elastic-ips/{eip['id']}/release").json()
    assert second == {"address": "198.51.100.1", "outcome": "released"}
    assert not ElasticIP.objects.exists()


def test_an_interface_of_another_project_is_a_field_error(
    api_for, operator, outsider, other_project
):
    theirs = SubnetFactory(project=other_project, cidr_v4="10.60.0.0/24")
    their_nic = instance_create(
        project=other_project, actor=outsider, request=instance_request(theirs, name="their-vm")
    ).nics.get()
    api = api_for("operator")
    eip = api.post("/projects/alpha/elastic-ips").json()
    for nic in (their_nic.pk, 31337):  # another project's interface is as good as none
        errors = errors_of(
            api.post(f"/projects/alpha/elastic-ips/{eip['id']}/associate", {"nic": nic})
        )
        assert errors == {"nic": ["Choose an interface of this project."]}
    assert ElasticIP.objects.get(pk=eip["id"]).nic is None


def test_an_interface_with_an_address_already_is_refused(api_for, operator, instance):
    api, nic = api_for("operator"), instance.nics.get()
    first, second = (api.post("/projects/alpha/elastic-ips").json() for _ in range(2))
    api.post(f"/projects/alpha/elastic-ips/{first['id']}/associate", {"nic": nic.pk})
    errors = errors_of(
        api.post(f"/projects/alpha/elastic-ips/{second['id']}/associate", {"nic": nic.pk})
    )
    assert errors == {"nic": ["eth0 of web-1 already has an Elastic IP."]}


def test_a_viewer_lists_but_cannot_allocate(api_for, viewer):
    api = api_for("viewer")
    assert api.get("/projects/alpha/elastic-ips").json() == []
    assert api.post("/projects/alpha/elastic-ips").status_code == 403


def test_an_outsider_gets_404_for_the_projects_addresses(api_for, operator, outsider):
    eip = api_for("operator").post("/projects/alpha/elastic-ips").json()
    assert (
        api_for("outsider").post(f"/projects/alpha/elastic-ips/{eip['id']}/release").status_code
        == 404
    )
    assert ElasticIP.objects.count() == 1
