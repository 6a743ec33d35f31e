"""A request with mistakes of several layers (a field off the schema, an id that names nothing, a
value the service refuses) gets all of them in one answer, at their fields; nothing changes."""

import pytest

from instances.models import (
    AuditEvent,
    Disk,
    ElasticIP,
    Image,
    ImageImport,
    Instance,
    NetworkInterface,
    SSHKey,
    Subnet,
)
from tests.instances.api.helpers import errors_of, public_key

pytestmark = pytest.mark.django_db

COLONS = "Use colon notation for MAC addresses: 52:54:00:12:34:56, not 52-54-00-12-34-56."
NOT_AN_INTEGER = "Input should be a valid integer, unable to parse string as an integer"


@pytest.fixture
def body(subnet, image):
    return {
        "name": "web-1", "zone": "local-1a", "root_image": image.pk, "root_size_gb": 2,
        "nics": [{"subnet": subnet.pk}],
    }  # fmt: skip


def test_a_nic_model_off_the_schema_comes_with_a_missing_subnet_and_a_bad_mac(
    api_for, operator, instance
):
    url = f"/projects/alpha/instances/{instance.pk}/nics"
    body = {"subnet": 9999, "mac": "52-54-00-12-34-56", "model": "rtl8139"}
    errors = errors_of(api_for("operator").post(url, body))
    assert errors == {
        "model": ["Input should be 'virtio' or 'e1000'"],
        "subnet": ["Choose a subnet of this project."],
        "mac": [COLONS],
    }
    assert instance.nics.count() == 1


def test_an_instance_create_reports_schema_and_meaning_mistakes_together(
    api_for, operator, body, subnet
):
    body["vcpus"] = "two"
    body["disks"] = [{"size_gb": 0}]
    body["nics"] = [
        {"subnet": subnet.pk, "model": "rtl8139"},
        {"subnet": 9999, "mac": "52-54-00-12-34-56"},
    ]
    api, events = api_for("operator"), AuditEvent.objects.count()
    errors = errors_of(api.post("/projects/alpha/instances", body))
    assert errors == {
        "vcpus": [NOT_AN_INTEGER],
        "disks-0-size_gb": ["Disk size must be between 1 and 16384 GB."],
        "nics-0-model": ["Input should be 'virtio' or 'e1000'"],
        "nics-1-subnet": ["Choose a subnet of this project."],
        "nics-1-mac": [COLONS],
    }
    assert not Instance.objects.exists() and not Disk.objects.exists()
    assert AuditEvent.objects.count() == events


def test_a_disk_create_reports_a_bad_bus_a_missing_image_and_a_bad_zone(api_for, operator):
    body = {"name": "data", "zone": "mars-1", "size_gb": 5, "bus": "floppy", "image": 9999}
    errors = errors_of(api_for("operator").post("/projects/alpha/disks", body))
    assert set(errors) == {"bus", "image", "zone"}
    assert errors["image"] == ["Choose an image of this project or a shared one."]
    assert not Disk.objects.exists()


def test_a_subnet_create_reports_a_wrong_type_with_a_bad_zone_and_cidr(api_for, operator):
    body = {"name": "lan", "zone": "mars-1", "cidr_v4": "10.1.0.0/33", "gateway": 5}
    errors = errors_of(api_for("operator").post("/projects/alpha/subnets", body))
    assert set(errors) == {"gateway", "zone", "cidr_v4"}
    assert errors["gateway"] == ["Input should be a valid string"]
    assert not Subnet.objects.filter(name="lan").exists()


def test_an_ssh_key_create_reports_a_missing_name_with_a_bad_key(api_for, operator):
    body = {"name": ["web"], "public_key": "ssh-rsa nonsense"}
    errors = errors_of(api_for("operator").post("/projects/alpha/ssh-keys", body))
    assert set(errors) == {"name", "public_key"}
    assert not SSHKey.objects.exists()


def test_an_elastic_ip_association_reports_an_id_off_the_schema(api_for, operator):
    eip = api_for("operator").post("/projects/alpha/elastic-ips").json()
    url = f"/projects/alpha/elastic-ips/{eip['id']}/associate"
    errors = errors_of(api_for("operator").post(url, {"nic": "eth0", "extra": 1}))
    assert errors == {
        "nic": [NOT_AN_INTEGER],
        "extra": ["This field is unknown here: check its name in the API docs."],
    }
    assert ElasticIP.objects.get().nic is None


def test_an_unknown_query_parameter_comes_with_the_bodys_meaning_errors(
    api_for, operator, instance
):
    url = f"/projects/alpha/instances/{instance.pk}/nics?dry=1"
    response = api_for("operator").post(url, {"subnet": 9999, "model": "rtl8139"})
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"dry", "subnet", "model"}
    assert NetworkInterface.objects.count() == 1


def test_a_stranger_gets_404_not_the_bodys_mistakes(api_for, outsider, instance):
    url = f"/projects/alpha/instances/{instance.pk}/nics"
    response = api_for("outsider").post(url, {"subnet": 9999, "model": "rtl8139"})
    assert response.status_code == 404


def test_a_viewer_gets_403_not_the_bodys_mistakes(api_for, viewer, instance):
    url = f"/projects/alpha/instances/{instance.pk}/nics"
    response = api_for("viewer").post(url, {"subnet": 9999, "model": "rtl8139"})
    assert response.status_code == 403


def test_a_valid_key_beside_a_field_off_the_schema_is_not_kept(api_for, operator):
    body = {"name": "laptop", "public_key": public_key(), "comment": "unknown"}
    errors = errors_of(api_for("operator").post("/projects/alpha/ssh-keys", body))
    assert errors == {"comment": ["This field is unknown here: check its name in the API docs."]}
    assert not SSHKey.objects.exists()


def test_a_container_image_reports_an_os_off_the_schema_with_a_bad_reference(api_for, operator):
    body = {"name": " ", "reference": "Not A Reference!", "os_type": "beos"}
    errors = errors_of(api_for("operator").post("/projects/alpha/container-images", body))
    assert set(errors) == {"name", "reference", "os_type"}
    assert errors["name"] == ["Give the image a name."]
    assert not Image.objects.exists()


def test_an_image_import_reports_a_name_off_the_schema_with_a_bad_url_and_checksum(
    api_for, operator
):
    body = {"name": 5, "format": "vmdk", "url": "ftp://example.com/a.img", "sha256": "abc"}
    errors = errors_of(api_for("operator").post("/projects/alpha/image-imports", body))
    assert set(errors) == {"name", "format", "url", "sha256"}
    assert errors["name"] == ["Input should be a valid string"]
    assert not ImageImport.objects.exists()
