"""Creating, listing, reading and deleting instances through the API."""

import pytest

from instances.choices import ImageKind, PowerState
from instances.models import Disk, Instance
from tests.factories import ImageFactory, SubnetFactory
from tests.instances.api.helpers import errors_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def body(subnet, image):
    return {
        "name": "web-1",
        "zone": "local-1a",
        "root_image": image.pk,
        "root_size_gb": 2,
        "vcpus": 2,
        "memory_gb": 2,
        "disks": [{"size_gb": 10, "name": "web-1-data"}],
        "nics": [{"subnet": subnet.pk}],
    }


def test_an_operator_creates_an_instance_with_its_disks_and_nics(api_for, operator, body):
    response = api_for("operator").post("/projects/alpha/instances", body)
    assert response.status_code == 201
    created = response.json()
    assert (created["name"], created["vcpus"], created["power_state"]) == ("web-1", 2, "stopped")
    assert [(d["name"], d["role"], d["size_gb"]) for d in created["disks"]] == [
        ("web-1-data", "secondary", 10),
        ("web-1-root", "root", 2),
    ]
    assert [(n["name"], n["ipv4"]) for n in created["nics"]] == [("eth0", "10.20.0.2")]
    assert created["allowed_actions"]["start"] == {"ok": True, "reason": ""}
    assert created["allowed_actions"]["delete"] == {"ok": False, "reason": "Needs the admin role."}


def test_a_hyphenated_mac_is_refused_on_that_nic(api_for, operator, body, subnet):
    body["nics"] = [{"subnet": subnet.pk}, {"subnet": subnet.pk, "mac": "52-54-00-12-34-56"}]
    errors = errors_of(api_for("operator").post("/projects/alpha/instances", body))
    assert errors == {
        "nics-1-mac": [
            "Use colon notation for MAC addresses: 52:54:00:12:34:56, not 52-54-00-12-34-56."
        ]
    }
    assert not Instance.objects.exists() and not Disk.objects.exists()


def test_a_second_disk_out_of_range_is_refused_on_that_disk(api_for, operator, body):
    body["disks"] = [{"size_gb": 10}, {"size_gb": 0}]
    errors = errors_of(api_for("operator").post("/projects/alpha/instances", body))
    assert errors == {"disks-1-size_gb": ["Disk size must be between 1 and 16384 GB."]}


def test_instance_fields_are_refused_with_the_services_messages(api_for, operator, body):
    body.update(zone="mars-1", secure_boot=True, sockets=2)
    errors = errors_of(api_for("operator").post("/projects/alpha/instances", body))
    assert errors == {
        "zone": ["Choose one of the zones: local-1a, local-1b."],
        "sockets": ["Give sockets, cores and threads together, or none of them."],
        "secure_boot": ["Secure Boot requires the UEFI bootloader."],
    }


def test_every_mistake_of_a_create_is_reported_at_once(api_for, operator, body, subnet):
    body.update(vcpus=3, root_size_gb=0)
    body["disks"] = [{"size_gb": 10}, {"size_gb": 20000}]
    body["nics"] = [
        {"subnet": subnet.pk, "ipv4": "10.20.0.300"},
        {"subnet": subnet.pk, "mac": "52-54-00-12-34-56", "ipv4": "10.30.0.5"},
    ]
    errors = errors_of(api_for("operator").post("/projects/alpha/instances", body))
    assert errors == {
        "vcpus": ["Choose a vCPU count of 1, 2, 4, 8, 16 or 32."],
        "root_size_gb": ["Disk size must be between 1 and 16384 GB."],
        "disks-1-size_gb": ["Disk size must be between 1 and 16384 GB."],
        "nics-0-ipv4": ["10.20.0.300 is not an IPv4 address."],
        "nics-1-mac": [
            "Use colon notation for MAC addresses: 52:54:00:12:34:56, not 52-54-00-12-34-56."
        ],
        "nics-1-ipv4": ["10.30.0.5 is outside subnet backend (10.20.0.0/24)."],
    }
    assert not Instance.objects.exists() and not Disk.objects.exists()


def test_with_valid_instance_fields_every_disk_and_nic_mistake_is_reported(
    api_for, operator, body, subnet
):
    body["disks"] = [{"size_gb": 0}, {"size_gb": 10}, {"size_gb": 5, "boot_order": 1}]
    body["nics"] = [
        {"subnet": subnet.pk, "ipv4": "10.30.0.5"},
        {"subnet": subnet.pk, "ipv4": "10.20.0.1"},
    ]
    errors = errors_of(api_for("operator").post("/projects/alpha/instances", body))
    assert errors == {
        "disks-0-size_gb": ["Disk size must be between 1 and 16384 GB."],
        "disks-2-boot_order": [
            "web-1-root already boots at order 1 on web-1: give this disk another (lower boots "
            "first; the root disk is 1)."
        ],
        "nics-0-ipv4": ["10.30.0.5 is outside subnet backend (10.20.0.0/24)."],
        "nics-1-ipv4": ["10.20.0.1 is the network, broadcast or gateway address of backend."],
    }
    assert not Instance.objects.exists() and not Disk.objects.exists()


def test_a_subnet_not_found_does_not_hide_a_bad_mac_or_disk_size(api_for, operator, body, subnet):
    body["disks"] = [{"size_gb": 0}]
    body["nics"] = [{"subnet": subnet.pk}, {"subnet": 9999, "mac": "52-54-00-12-34-56"}]
    errors = errors_of(api_for("operator").post("/projects/alpha/instances", body))
    assert errors == {
        "disks-0-size_gb": ["Disk size must be between 1 and 16384 GB."],
        "nics-1-subnet": ["Choose a subnet of this project."],
        "nics-1-mac": [
            "Use colon notation for MAC addresses: 52:54:00:12:34:56, not 52-54-00-12-34-56."
        ],
    }
    assert not Instance.objects.exists() and not Disk.objects.exists()


def test_an_invalid_zone_does_not_hide_a_bad_mac(api_for, operator, body, subnet):
    body["zone"] = "mars-1"
    body["nics"] = [{"subnet": subnet.pk, "mac": "52-54-00-12-34-56", "ipv4": "10.20.0.300"}]
    errors = errors_of(api_for("operator").post("/projects/alpha/instances", body))
    assert errors == {
        "zone": ["Choose one of the zones: local-1a, local-1b."],
        "nics-0-mac": [
            "Use colon notation for MAC addresses: 52:54:00:12:34:56, not 52-54-00-12-34-56."
        ],
        "nics-0-ipv4": ["10.20.0.300 is not an IPv4 address."],
    }


def test_an_image_not_found_is_reported_with_the_instance_fields(api_for, operator, body):
    body.update(root_image=9999, vcpus=3)
    errors = errors_of(api_for("operator").post("/projects/alpha/instances", body))
    assert errors == {
        "root_image": ["Choose an image of this project or a shared one."],
        "vcpus": ["Choose a vCPU count of 1, 2, 4, 8, 16 or 32."],
    }


def test_without_a_root_image_the_instance_installs_from_its_cdrom(api_for, operator, body):
    iso = ImageFactory(kind=ImageKind.ISO, name="installer")
    del body["root_image"]
    refused = api_for("operator").post("/projects/alpha/instances", body)
    assert errors_of(refused) == {
        "root_image": [
            "Choose an image for the root disk, or leave it blank and add a CD-ROM with an ISO "
            "to install from."
        ]
    }
    body["disks"].append({"size_gb": 0, "role": "cdrom", "image": iso.pk})
    created = api_for("operator").post("/projects/alpha/instances", body)
    assert created.status_code == 201, created.content
    disks = {d["role"]: d for d in created.json()["disks"]}
    assert (disks["root"]["image"], disks["root"]["boot_order"]) == (None, 1)
    assert (disks["cdrom"]["image"], disks["cdrom"]["boot_order"]) == (iso.pk, 2)


def test_an_instance_without_nics_is_refused(api_for, operator, body):
    body["nics"] = []
    errors = errors_of(api_for("operator").post("/projects/alpha/instances", body))
    assert errors == {"nics": ["Attach the instance to at least one subnet."]}


def test_no_nics_is_reported_with_the_instances_own_mistakes(api_for, operator, body):
    body.update(nics=[], vcpus=3)
    errors = errors_of(api_for("operator").post("/projects/alpha/instances", body))
    assert errors == {
        "vcpus": ["Choose a vCPU count of 1, 2, 4, 8, 16 or 32."],
        "nics": ["Attach the instance to at least one subnet."],
    }
    assert not Instance.objects.exists()


def test_ids_of_another_project_are_field_errors_all_reported_at_once(
    api_for, operator, body, other_project
):
    body["root_image"] = ImageFactory(project=other_project).pk
    body["nics"] = [{"subnet": SubnetFactory(project=other_project).pk}]
    body["ssh_keys"] = [999999]
    api = api_for("operator")
    assert errors_of(api.post("/projects/alpha/instances", body)) == {
        "root_image": ["Choose an image of this project or a shared one."],
        "ssh_keys": ["Choose SSH keys of this project."],
        "nics-0-subnet": ["Choose a subnet of this project."],
    }
    assert not Instance.objects.exists()


def test_unknown_ids_and_wrong_instance_fields_are_reported_together(api_for, operator, body):
    body.update(root_image=999999, memory_gb=3, name="Web_1")
    errors = errors_of(api_for("operator").post("/projects/alpha/instances", body))
    assert set(errors) == {"root_image", "memory_gb", "name"}
    assert errors["root_image"] == ["Choose an image of this project or a shared one."]
    assert errors["memory_gb"] == ["Choose a RAM size of 1, 2, 4, 8, 16, 32 or 64 GB."]
    assert not Instance.objects.exists()


def test_a_nic_without_its_subnet_is_a_schema_error_with_the_field_path(api_for, operator, body):
    body["nics"] = [{"ipv4": "10.20.0.9"}]
    body["vcpus"] = "many"
    errors = errors_of(api_for("operator").post("/projects/alpha/instances", body))
    assert errors == {
        "vcpus": ["Input should be a valid integer, unable to parse string as an integer"],
        "nics-0-subnet": ["Field required"],
    }


def test_a_viewer_cannot_create_an_instance(api_for, viewer, body):
    response = api_for("viewer").post("/projects/alpha/instances", body)
    assert (response.status_code, response.json()["detail"]) == (
        403,
        "This needs the operator role in Alpha.",
    )
    assert not Instance.objects.exists()


def test_an_outsider_cannot_create_in_the_project(api_for, outsider, body):
    assert api_for("outsider").post("/projects/alpha/instances", body).status_code == 404


def test_a_viewer_reads_an_instance_and_sees_what_they_may_not_do(api_for, viewer, instance):
    response = api_for("viewer").get(f"/projects/alpha/instances/{instance.pk}")
    assert response.status_code == 200
    assert response.json()["allowed_actions"]["start"] == {
        "ok": False,
        "reason": "Needs the operator role.",
    }


def test_another_projects_instance_is_404(api_for, outsider, instance):
    assert api_for("outsider").get(f"/projects/alpha/instances/{instance.pk}").status_code == 404
    assert api_for("outsider").get(f"/projects/beta/instances/{instance.pk}").status_code == 404


def make(project, operator, subnet, image, name, **fields):
    from instances.services.instances import instance_create
    from tests.factories import instance_request

    return instance_create(
        project=project,
        actor=operator,
        request=instance_request(subnet, image, name=name, **fields),
    )


def test_the_list_filters_by_state_zone_subnet_and_search(
    api_for, project, operator, subnet, image
):
    other_subnet = SubnetFactory(project=project, name="b", zone="local-1b", cidr_v4="10.40.0.0/24")
    web = make(project, operator, subnet, image, "web-1")
    make(project, operator, subnet, image, "db-1")
    batch = make(project, operator, other_subnet, image, "batch-1", zone="local-1b")
    Instance.objects.filter(pk=web.pk).update(power_state=PowerState.RUNNING)
    api = api_for("viewer")

    def names(**params):
        return [i["name"] for i in api.get("/projects/alpha/instances", params).json()["items"]]

    assert names() == ["batch-1", "db-1", "web-1"]
    assert names(state="running") == ["web-1"]
    assert names(zone="local-1b") == ["batch-1"]
    assert names(subnet=other_subnet.pk) == ["batch-1"]
    assert names(search="DB") == ["db-1"]
    assert names(search=batch.nics.get().ipv4) == ["batch-1"]
    assert names(search=web.nics.get().mac.upper()) == ["web-1"]


def test_the_list_is_paginated(api_for, project, operator, subnet, image):
    for number in range(3):
        make(project, operator, subnet, image, f"vm-{number}")
    page = api_for("operator").get("/projects/alpha/instances", {"page": 2, "page_size": 2}).json()
    assert (page["count"], page["page"], page["page_size"]) == (3, 2, 2)
    assert [i["name"] for i in page["items"]] == ["vm-2"]


def test_a_page_size_out_of_range_is_a_schema_error(api_for, operator):
    errors = errors_of(api_for("operator").get("/projects/alpha/instances", {"page_size": 1000}))
    assert errors == {"page_size": ["Input should be less than or equal to 200"]}


def test_an_admin_deletes_a_stopped_instance(
    api_for, owner, instance, host_queue_of, django_capture_on_commit_callbacks
):
    queue = host_queue_of(instance)
    with django_capture_on_commit_callbacks(execute=True):
        response = api_for("owner").delete(f"/projects/alpha/instances/{instance.pk}")
    assert response.status_code == 204
    assert not Instance.objects.filter(pk=instance.pk).exists()
    # the machine's files go on its host, after the commit
    assert [sent.task for sent in queue.sent()] == ["instances.machine_undefine"]


def test_an_operator_cannot_delete_an_instance(api_for, operator, instance):
    response = api_for("operator").delete(f"/projects/alpha/instances/{instance.pk}")
    assert response.status_code == 403
    assert response.json()["detail"] == "This needs the admin role in Alpha."


def test_a_running_instance_is_not_deleted(api_for, owner, instance):
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.RUNNING)
    response = api_for("owner").delete(f"/projects/alpha/instances/{instance.pk}")
    assert response.status_code == 409
    assert response.json()["detail"] == "Stop the instance before deleting it."


def test_the_list_gives_each_instance_its_ssh_keys_in_name_order_as_the_details_do(
    api_for, project, operator, subnet, image
):
    from instances.models import SSHKey

    web, _db = (make(project, operator, subnet, image, name) for name in ("web-1", "db-1"))
    zeta, alpha = (
        SSHKey.objects.create(project=project, name=name, public_key=name, fingerprint=name)
        for name in ("zeta", "alpha")
    )
    web.ssh_keys.set([zeta, alpha])
    api = api_for("viewer")
    items = api.get("/projects/alpha/instances").json()["items"]
    assert {i["name"]: i["ssh_keys"] for i in items} == {"db-1": [], "web-1": [alpha.pk, zeta.pk]}
    details = api.get(f"/projects/alpha/instances/{web.pk}").json()
    assert details["ssh_keys"] == [alpha.pk, zeta.pk]
