"""Subnets through the API: the services' rules and messages, and who may change them."""

import pytest

from instances.models import AuditEvent, Subnet
from tests.factories import SubnetFactory
from tests.instances.api.helpers import errors_of

pytestmark = pytest.mark.django_db

NEW = {"name": "frontend", "zone": "local-1a", "cidr_v4": "10.30.0.0/24"}


def test_an_operator_creates_a_subnet(api_for, operator):
    response = api_for("operator").post("/projects/alpha/subnets", NEW)
    assert response.status_code == 201
    body = response.json()
    assert (body["name"], body["cidr_v4"], body["gateway"]) == (
        "frontend",
        "10.30.0.0/24",
        "10.30.0.1",
    )
    assert AuditEvent.objects.filter(action="subnet.create", actor=operator).exists()


def test_a_cidr_with_host_bits_names_the_network_meant(api_for, operator):
    response = api_for("operator").post(
        "/projects/alpha/subnets", {**NEW, "cidr_v4": "10.30.0.5/24"}
    )
    assert errors_of(response) == {
        "cidr_v4": ["10.30.0.5/24 has host bits set; did you mean 10.30.0.0/24?"]
    }
    assert (
        response.json()["detail"]
        == "cidr_v4: 10.30.0.5/24 has host bits set; did you mean 10.30.0.0/24?"
    )


def test_an_overlapping_subnet_and_an_unknown_zone_are_both_reported(api_for, operator, subnet):
    body = {**NEW, "zone": "mars-1", "cidr_v4": "10.20.0.0/16"}
    errors = errors_of(api_for("operator").post("/projects/alpha/subnets", body))
    assert errors["zone"] == ["Choose one of the zones: local-1a, local-1b."]
    assert errors["cidr_v4"] == ["10.20.0.0/16 overlaps subnet backend (10.20.0.0/24)."]


def test_a_gateway_that_is_not_an_address_is_a_field_error(api_for, operator):
    body = {**NEW, "gateway": "router"}
    errors = errors_of(api_for("operator").post("/projects/alpha/subnets", body))
    assert errors == {"gateway": ["Enter a valid IPv4 address."]}


def test_a_missing_name_is_a_schema_error_reported_with_the_others(api_for, operator):
    errors = errors_of(api_for("operator").post("/projects/alpha/subnets", {"zone": "local-1a"}))
    assert errors == {
        "name": ["Field required"],
        "cidr_v4": ["Give an IPv4 CIDR, an IPv6 CIDR, or both."],
    }


def test_a_viewer_cannot_create_a_subnet(api_for, viewer):
    response = api_for("viewer").post("/projects/alpha/subnets", NEW)
    assert response.status_code == 403
    assert response.json()["detail"] == "This needs the operator role in Alpha."
    assert not Subnet.objects.filter(name="frontend").exists()


def test_an_outsider_gets_404_for_the_projects_subnets(api_for, outsider, subnet):
    api = api_for("outsider")
    assert api.get("/projects/alpha/subnets").status_code == 404
    assert api.get(f"/projects/alpha/subnets/{subnet.pk}").status_code == 404
    assert api.post("/projects/alpha/subnets", NEW).status_code == 404


def test_another_projects_subnet_is_404_even_under_ones_own_project(
    api_for, operator, other_project
):
    theirs = SubnetFactory(project=other_project)
    api = api_for("operator")
    assert api.get(f"/projects/alpha/subnets/{theirs.pk}").status_code == 404
    assert api.delete(f"/projects/alpha/subnets/{theirs.pk}").status_code == 404
    assert api.get(f"/projects/beta/subnets/{theirs.pk}").status_code == 404


def test_a_viewer_lists_and_reads_subnets(api_for, viewer, subnet):
    api = api_for("viewer")
    assert [s["name"] for s in api.get("/projects/alpha/subnets").json()] == ["backend"]
    assert api.get(f"/projects/alpha/subnets/{subnet.pk}").json()["cidr_v4"] == "10.20.0.0/24"


def test_an_operator_deletes_a_free_subnet(api_for, operator, subnet):
    response = api_for("operator").delete(f"/projects/alpha/subnets/{subnet.pk}")
    assert response.status_code == 204
    assert not Subnet.objects.filter(pk=subnet.pk).exists()


def test_a_viewer_cannot_delete_a_subnet(api_for, viewer, subnet):
    response = api_for("viewer").delete(f"/projects/alpha/subnets/{subnet.pk}")
    assert (response.status_code, response.json()["detail"]) == (
        403,
        "This needs the operator role in Alpha.",
    )
    assert Subnet.objects.filter(pk=subnet.pk).exists()


def test_a_subnet_in_use_is_not_deleted(api_for, instance, subnet):
    response = api_for("operator").delete(f"/projects/alpha/subnets/{subnet.pk}")
    assert response.status_code == 409
    assert response.json() == {
        "detail": "Subnet backend still has interfaces attached; remove them first.",
        "errors": {},
    }
