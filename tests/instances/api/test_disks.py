"""Disks through the API: create, attach, detach, resize, snapshot."""

import pytest

from instances.choices import PowerState
from instances.models import Disk, DiskSnapshot, Instance
from tests.factories import ImageFactory
from tests.instances.api.helpers import errors_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def free_disk(api_for, operator):
    body = {"name": "data-1", "zone": "local-1a", "size_gb": 5}
    return api_for("operator").post("/projects/alpha/disks", body).json()


def test_an_operator_creates_a_free_disk(api_for, free_disk):
    assert (free_disk["name"], free_disk["size_gb"], free_disk["instance"]) == ("data-1", 5, None)
    assert [d["name"] for d in api_for("operator").get("/projects/alpha/disks").json()] == [
        "data-1"
    ]


def test_a_disk_too_large_is_refused(api_for, operator):
    body = {"name": "huge", "zone": "local-1a", "size_gb": 20000}
    assert errors_of(api_for("operator").post("/projects/alpha/disks", body)) == {
        "size_gb": ["Disk size must be between 1 and 16384 GB."]
    }


def test_a_disk_from_another_projects_image_is_refused(api_for, operator, other_project):
    image = ImageFactory(project=other_project)
    body = {"name": "d", "zone": "local-1a", "size_gb": 5, "image": image.pk}
    assert errors_of(api_for("operator").post("/projects/alpha/disks", body)) == {
        "image": ["Choose an image of this project or a shared one."]
    }


def test_an_image_not_found_is_reported_with_the_other_fields(api_for, operator):
    body = {"name": "d", "zone": "mars-1", "size_gb": 0, "image": 9999}
    assert errors_of(api_for("operator").post("/projects/alpha/disks", body)) == {
        "image": ["Choose an image of this project or a shared one."],
        "zone": ["Choose one of the zones: local-1a, local-1b."],
        "size_gb": ["Disk size must be between 1 and 16384 GB."],
    }


def test_a_viewer_cannot_create_a_disk(api_for, viewer):
    body = {"name": "d", "zone": "local-1a", "size_gb": 5}
    response = api_for("viewer").post("/projects/alpha/disks", body)
    assert (response.status_code, response.json()["detail"]) == (
        403,
        "This needs the operator role in Alpha.",
    )
    assert not Disk.objects.exists()


def test_a_disk_is_attached_and_detached(api_for, instance, free_disk):
    api = api_for("operator")
    attached = api.post(
        f"/projects/alpha/disks/{free_disk['id']}/attach", {"instance": instance.pk}
    )
    assert (attached.status_code, attached.json()["instance"]) == (200, instance.pk)
    detached = api.post(f"/projects/alpha/disks/{free_disk['id']}/detach")
    assert (detached.status_code, detached.json()["instance"]) == (200, None)


def test_a_disk_of_another_zone_is_not_attached(api_for, instance, operator):
    disk = (
        api_for("operator")
        .post("/projects/alpha/disks", {"name": "far", "zone": "local-1b", "size_gb": 1})
        .json()
    )
    errors = errors_of(
        api_for("operator").post(
            f"/projects/alpha/disks/{disk['id']}/attach", {"instance": instance.pk}
        )
    )
    assert errors == {
        "zone": [
            "The disk is in local-1b but the instance is in local-1a; a disk must be in its instance's zone."
        ]
    }


def test_attaching_to_an_unknown_instance_is_a_field_error(api_for, free_disk):
    errors = errors_of(
        api_for("operator").post(
            f"/projects/alpha/disks/{free_disk['id']}/attach", {"instance": 424242}
        )
    )
    assert errors == {"instance": ["Choose an instance of this project."]}


def test_a_disk_is_not_detached_from_a_running_instance(api_for, instance, free_disk):
    api = api_for("operator")
    api.post(f"/projects/alpha/disks/{free_disk['id']}/attach", {"instance": instance.pk})
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.RUNNING)
    response = api.post(f"/projects/alpha/disks/{free_disk['id']}/detach")
    assert response.status_code == 409
    assert response.json()["detail"].startswith(
        "Stop the instance before detaching a persistent disk"
    )


def test_a_disk_only_grows(api_for, free_disk):
    api = api_for("operator")
    grown = api.post(f"/projects/alpha/disks/{free_disk['id']}/resize", {"size_gb": 8})
    assert grown.json()["size_gb"] == 8
    assert errors_of(
        api.post(f"/projects/alpha/disks/{free_disk['id']}/resize", {"size_gb": 4})
    ) == {"size_gb": ["Disks can only grow: enter more than the current 8 GB."]}


def test_a_viewer_cannot_resize_a_disk(api_for, viewer, free_disk):
    response = api_for("viewer").post(
        f"/projects/alpha/disks/{free_disk['id']}/resize", {"size_gb": 8}
    )
    assert (response.status_code, response.json()["detail"]) == (
        403,
        "This needs the operator role in Alpha.",
    )
    assert Disk.objects.get(pk=free_disk["id"]).size_gb == 5


def test_an_attached_disk_is_snapshotted_once_per_name(
    api_for, instance, django_capture_on_commit_callbacks
):
    root = instance.disks.get(role="root")
    api = api_for("operator")
    with django_capture_on_commit_callbacks() as callbacks:
        response = api.post(
            f"/projects/alpha/disks/{root.pk}/snapshots", {"name": "before-upgrade"}
        )
    assert response.status_code == 201 and len(callbacks) == 1
    assert response.json()["disk"] == root.pk
    again = api.post(f"/projects/alpha/disks/{root.pk}/snapshots", {"name": "before-upgrade"})
    assert errors_of(again) == {
        "name": [f"{root.name} already has a snapshot called before-upgrade; it is being taken."]
    }
    assert DiskSnapshot.objects.count() == 1


def test_an_instance_snapshot_takes_every_disk_under_one_name(
    api_for, instance, free_disk, django_capture_on_commit_callbacks
):
    api_for("operator").post(f"/projects/alpha/disks/{free_disk['id']}/attach",
                             {"instance": instance.pk})  # fmt: skip
    url = f"/projects/alpha/instances/{instance.pk}/snapshots"
    assert api_for("viewer").post(url, {"name": "nightly"}).status_code == 403
    with django_capture_on_commit_callbacks() as callbacks:
        response = api_for("operator").post(url, {"name": "nightly"})
    assert response.status_code == 201 and len(callbacks) == 1  # one task for both disks
    assert sorted(s["disk"] for s in response.json()) == sorted(
        instance.disks.values_list("pk", flat=True)
    )
    assert {s["state"] for s in response.json()} == {"taking"}
    assert errors_of(api_for("operator").post(url, {"name": "Nightly!"}))["name"][0].startswith(
        "Use 1-63 lowercase letters"
    )
    assert DiskSnapshot.objects.count() == 2


def test_a_disks_snapshots_list_their_state_and_a_failed_one_is_retried_by_name(
    api_for, instance, django_capture_on_commit_callbacks
):
    root = instance.disks.get(role="root")
    failed = DiskSnapshot.objects.create(
        disk=root, name="before-upgrade", state="failed", message="No space left."
    )
    listed = api_for("viewer").get(f"/projects/alpha/disks/{root.pk}/snapshots").json()
    assert [(s["name"], s["state"], s["message"]) for s in listed] == [
        ("before-upgrade", "failed", "No space left.")
    ]
    with django_capture_on_commit_callbacks() as callbacks:
        retried = api_for("operator").post(
            f"/projects/alpha/disks/{root.pk}/snapshots", {"name": "before-upgrade"}
        )
    assert retried.status_code == 201 and len(callbacks) == 1
    assert (retried.json()["id"], retried.json()["state"]) == (failed.pk, "taking")


def test_a_snapshot_is_deleted_by_id_once_taken(
    api_for, instance, django_capture_on_commit_callbacks
):
    root = instance.disks.get(role="root")
    snapshot = DiskSnapshot.objects.create(disk=root, name="nightly")
    url = f"/projects/alpha/disks/{root.pk}/snapshots/{snapshot.pk}"
    api = api_for("operator")
    assert api.delete(url).json()["detail"] == "Snapshot nightly is being taken; wait for it."
    DiskSnapshot.objects.filter(pk=snapshot.pk).update(state="ready")
    assert api_for("viewer").delete(url).status_code == 403
    with django_capture_on_commit_callbacks() as callbacks:
        response = api.delete(url)
    assert (response.status_code, response.json()["state"]) == (202, "deleting")
    assert len(callbacks) == 1
    assert (
        api.delete(f"/projects/alpha/disks/{root.pk}/snapshots/{snapshot.pk + 1}").status_code
        == 404
    )


def test_a_stopped_instances_disk_is_reverted_with_a_confirmation(
    api_for, instance, django_capture_on_commit_callbacks
):
    root = instance.disks.get(role="root")
    snapshot = DiskSnapshot.objects.create(disk=root, name="nightly", state="ready")
    url = f"/projects/alpha/disks/{root.pk}/snapshots/{snapshot.pk}/revert"
    api = api_for("operator")
    refused = api.post(url, {})
    assert (refused.status_code, refused.json()["detail"]) == (
        409,
        f"Reverting {root.name} to nightly discards everything written to it since the "
        "snapshot. Confirm to continue.",
    )
    with django_capture_on_commit_callbacks() as callbacks:
        response = api.post(url, {"confirm": True})
    assert (response.status_code, response.json()["name"], len(callbacks)) == (202, "nightly", 1)


def test_a_free_disk_cannot_be_snapshotted(api_for, free_disk):
    response = api_for("operator").post(
        f"/projects/alpha/disks/{free_disk['id']}/snapshots", {"name": "s1"}
    )
    assert response.status_code == 409
    assert response.json()["detail"] == "Attach the disk to an instance to snapshot it."


def test_an_outsider_gets_404_for_the_projects_disks(api_for, outsider, instance):
    root = instance.disks.get(role="root")
    api = api_for("outsider")
    assert api.get(f"/projects/alpha/disks/{root.pk}").status_code == 404
    assert api.post(f"/projects/alpha/disks/{root.pk}/resize", {"size_gb": 9}).status_code == 404


def test_a_free_disk_is_deleted_and_an_attached_one_is_409(api_for, instance, free_disk):
    api = api_for("operator")
    attach = api.post(f"/projects/alpha/disks/{free_disk['id']}/attach", {"instance": instance.pk})
    assert attach.status_code == 200
    refused = api.delete(f"/projects/alpha/disks/{free_disk['id']}")
    assert refused.status_code == 409
    assert refused.json()["detail"] == "data-1 is attached to web-1: detach it first."
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.STOPPED)
    assert api.post(f"/projects/alpha/disks/{free_disk['id']}/detach").status_code == 200
    assert api_for("viewer").delete(f"/projects/alpha/disks/{free_disk['id']}").status_code == 403
    assert api.delete(f"/projects/alpha/disks/{free_disk['id']}").status_code == 204
    assert not Disk.objects.filter(pk=free_disk["id"]).exists()
    assert api.delete(f"/projects/alpha/disks/{free_disk['id']}").status_code == 404


def test_no_disk_endpoint_acts_on_a_disk_of_another_project(api_for, instance, other_project):
    foreign = Disk.objects.create(project=other_project, zone="local-1a", name="far", size_gb=1)
    api = api_for("operator")
    for method, path, body in [
        ("post", "/detach", None),
        ("post", "/resize", {"size_gb": 9}),
        ("post", "/snapshots", {"name": "s1"}),
        ("post", "/attach", {"instance": instance.pk}),
        ("delete", "", None),
    ]:
        call = getattr(api, method)
        url = f"/projects/alpha/disks/{foreign.pk}{path}"
        response = call(url, body) if body is not None else call(url)
        assert (response.status_code, response.json()["detail"]) == (404, "Not found."), path
    assert Disk.objects.get(pk=foreign.pk).instance is None
