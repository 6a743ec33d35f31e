"""An instance's network interfaces through the API."""

import pytest

from instances.choices import LinkState, PowerState
from instances.models import Instance, NetworkInterface
from instances.services import network
from tests.factories import SubnetFactory
from tests.instances.api.helpers import errors_of

pytestmark = pytest.mark.django_db


def nics_url(instance):
    return f"/projects/alpha/instances/{instance.pk}/nics"


def test_a_viewer_lists_the_interfaces(api_for, viewer, instance):
    nics = api_for("viewer").get(nics_url(instance)).json()
    assert [(n["name"], n["primary"], n["ipv4"]) for n in nics] == [("eth0", True, "10.20.0.2")]


def test_an_operator_adds_an_interface_with_a_static_address(api_for, operator, instance, project):
    second = SubnetFactory(project=project, name="storage", cidr_v4="10.50.0.0/24")
    response = api_for("operator").post(
        nics_url(instance), {"subnet": second.pk, "ipv4": "10.50.0.10"}
    )
    assert response.status_code == 201
    assert (response.json()["name"], response.json()["ip_mode"], response.json()["ipv4"]) == (
        "eth1",
        "static",
        "10.50.0.10",
    )


def test_an_address_outside_the_subnet_is_refused(api_for, operator, instance, subnet):
    errors = errors_of(
        api_for("operator").post(nics_url(instance), {"subnet": subnet.pk, "ipv4": "10.99.0.1"})
    )
    assert errors == {"ipv4": ["10.99.0.1 is outside subnet backend (10.20.0.0/24)."]}


def test_a_subnet_of_another_project_is_a_field_error(api_for, operator, instance, other_project):
    theirs = SubnetFactory(project=other_project)
    errors = errors_of(api_for("operator").post(nics_url(instance), {"subnet": theirs.pk}))
    assert errors == {"subnet": ["Choose a subnet of this project."]}


def test_a_subnet_not_found_is_reported_with_a_bad_mac(api_for, operator, instance):
    body = {"subnet": 9999, "mac": "52-54-00-12-34-56"}
    errors = errors_of(api_for("operator").post(nics_url(instance), body))
    assert errors == {
        "subnet": ["Choose a subnet of this project."],
        "mac": ["Use colon notation for MAC addresses: 52:54:00:12:34:56, not 52-54-00-12-34-56."],
    }


def test_a_viewer_reads_one_interface(api_for, viewer, instance):
    nic = instance.nics.get()
    response = api_for("viewer").get(f"{nics_url(instance)}/{nic.pk}")
    assert (response.status_code, response.json()["name"]) == (200, "eth0")


def test_a_viewer_cannot_add_an_interface(api_for, viewer, instance, subnet):
    response = api_for("viewer").post(nics_url(instance), {"subnet": subnet.pk})
    assert (response.status_code, response.json()["detail"]) == (
        403,
        "This needs the operator role in Alpha.",
    )
    assert instance.nics.count() == 1


def test_an_interface_is_removed_only_while_stopped_and_never_the_primary(
    api_for, operator, instance
):
    eth0 = instance.nics.get()
    nic = network.nic_add(instance=instance, actor=operator, subnet=eth0.subnet)
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.RUNNING)
    refused = api_for("operator").delete(f"{nics_url(instance)}/{nic.pk}")
    assert (refused.status_code, refused.json()["detail"]) == (
        409,
        "Stop the instance before removing an interface.",
    )
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.STOPPED)
    refused = api_for("operator").delete(f"{nics_url(instance)}/{eth0.pk}")
    assert refused.status_code == 409
    assert refused.json()["detail"].startswith("eth0 is the primary interface: an instance keeps")
    assert api_for("operator").delete(f"{nics_url(instance)}/{nic.pk}").status_code == 204
    assert list(NetworkInterface.objects.all()) == [eth0]


def test_taking_the_primary_link_down_needs_a_confirmation(api_for, operator, instance):
    nic = instance.nics.get()
    url = f"{nics_url(instance)}/{nic.pk}/link"
    refused = api_for("operator").post(url, {"up": False})
    assert refused.status_code == 409
    assert refused.json()["detail"].startswith("eth0 is the primary interface")
    confirmed = api_for("operator").post(url, {"up": False, "confirm_primary": True})
    assert (confirmed.status_code, confirmed.json()["link_desired"]) == (200, LinkState.DOWN)


def test_a_nic_of_another_instance_is_404(api_for, operator, instance, project, subnet, image):
    from instances.services.instances import instance_create
    from tests.factories import instance_request

    other = instance_create(
        project=project, actor=operator, request=instance_request(subnet, image, name="other")
    )
    response = api_for("operator").delete(f"{nics_url(instance)}/{other.nics.get().pk}")
    assert response.status_code == 404


def test_an_outsider_gets_404_for_the_interfaces(api_for, outsider, instance):
    assert api_for("outsider").get(nics_url(instance)).status_code == 404
