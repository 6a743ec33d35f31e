import re
import subprocess

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from instances.errors import ActionRefused
from instances.models import Subnet
from instances.services.instances import instance_create
from instances.services.keys import ssh_key_add
from instances.services.network import subnet_create, subnet_delete
from tests.factories import instance_request

pytestmark = pytest.mark.django_db


def subnet_errors(project, owner, **fields) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        subnet_create(project=project, actor=owner, **{"name": "n", "zone": "local-1a", **fields})
    return caught.value.message_dict


def test_a_subnet_gets_its_first_address_as_gateway(project, owner):
    subnet = subnet_create(
        project=project, actor=owner, name="front", zone="local-1a", cidr_v4="10.1.0.0/24"
    )
    assert subnet.gateway == "10.1.0.1"


def test_a_subnet_needs_a_range(project, owner):
    assert subnet_errors(project, owner)["cidr_v4"] == ["Give an IPv4 CIDR, an IPv6 CIDR, or both."]


def test_a_subnet_range_with_host_bits_is_refused(project, owner):
    errors = subnet_errors(project, owner, cidr_v4="10.1.0.9/24")
    assert errors["cidr_v4"] == ["10.1.0.9/24 has host bits set; did you mean 10.1.0.0/24?"]


def test_a_tiny_subnet_is_refused(project, owner):
    assert subnet_errors(project, owner, cidr_v4="10.1.0.0/31")["cidr_v4"] == [
        "10.1.0.0/31 is too small: use at least a /30."
    ]


def test_a_tiny_ipv6_subnet_is_refused_with_the_smallest_ipv6_size(project, owner):
    assert subnet_errors(project, owner, cidr_v6="fd00:1::/127")["cidr_v6"] == [
        "fd00:1::/127 is too small: use at least a /126."
    ]


def test_overlapping_subnets_are_refused(project, owner, subnet):
    errors = subnet_errors(project, owner, cidr_v4="10.20.0.128/25")
    assert errors["cidr_v4"] == ["10.20.0.128/25 overlaps subnet backend (10.20.0.0/24)."]


def test_the_gateway_must_be_inside_the_range(project, owner):
    errors = subnet_errors(project, owner, cidr_v4="10.1.0.0/24", gateway="10.2.0.1")
    assert errors["gateway"] == ["The gateway must be inside 10.1.0.0/24."]


@pytest.mark.parametrize(
    ("gateway", "which"), [("10.1.0.0", "network"), ("10.1.0.255", "broadcast")]
)
def test_the_gateway_is_a_host_address(project, owner, gateway, which):
    errors = subnet_errors(project, owner, cidr_v4="10.1.0.0/24", gateway=gateway)
    assert errors["gateway"] == [
        f"{gateway} is 10.1.0.0/24's {which} address: choose a host address, such as 10.1.0.1."
    ]


def test_dns_resolvers_must_be_addresses(project, owner):
    errors = subnet_errors(
        project, owner, cidr_v4="10.1.0.0/24", dns_resolvers="1.1.1.1, dns.example"
    )
    assert errors["dns_resolvers"] == ["dns.example is not an IP address."]


def test_an_unknown_subnet_zone_is_refused(project, owner):
    errors = subnet_errors(project, owner, cidr_v4="10.1.0.0/24", zone="nowhere")
    assert errors["zone"] == ["Choose one of the zones: local-1a, local-1b."]


def test_a_subnet_in_use_cannot_be_deleted(project, owner, operator, subnet):
    instance_create(project=project, actor=operator, request=instance_request(subnet))
    with pytest.raises(ActionRefused, match="still has interfaces attached"):
        subnet_delete(subnet=subnet, actor=owner)
    assert Subnet.objects.filter(pk=subnet.pk).exists()


def test_the_subnet_list_disables_delete_for_a_subnet_in_use(client_for, project, operator, subnet):
    spare = subnet_create(
        project=project, actor=operator, name="spare", zone="local-1a", cidr_v4="10.9.0.0/24"
    )
    instance_create(project=project, actor=operator, request=instance_request(subnet))
    text = client_for("operator").get(reverse("subnet-list", args=[project.slug])).text
    in_use = re.search(r'<button aria-label="Delete subnet backend"[^>]*>', text)[0]
    assert "disabled" in in_use and "Interfaces are attached to it; remove them first." in in_use
    free = re.search(rf'<button aria-label="Delete subnet {spare.name}"[^>]*>', text)[0]
    assert "disabled" not in free


def test_an_ssh_key_is_stored_with_its_fingerprint_once(project, owner, tmp_path):
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "me@laptop", "-f", tmp_path / "k"],
        check=True,
    )
    public = (tmp_path / "k.pub").read_text()
    key = ssh_key_add(project=project, actor=owner, name="laptop", public_key=public)
    assert key.fingerprint.startswith("SHA256:") and key.public_key.endswith("me@laptop")
    with pytest.raises(ValidationError) as caught:
        ssh_key_add(project=project, actor=owner, name="again", public_key=public)
    assert caught.value.message_dict["public_key"] == [
        "This key is already in the project's catalog."
    ]
