"""Disks of instances on a cluster as CDI DataVolumes: the fake's CDI really fetches each
image through the console's signed link (from the live server) and the guest boots from the
imported disk; an import that fails is the instance's message, and the VM is left Halted."""

import time

import pytest

from instances.choices import ImageKind, PowerState
from instances.models import Image, Instance
from instances.services import power
from instances.services.instances import DiskRequest
from tests import factories
from tests.fakes.kubevirt.boot_disk import LABEL, build_boot_disk
from tests.fakes.kubevirt.fixtures import (
    guest_of,
    type_on_serial,
    wait_for_prompt,
    wait_for_state,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def boot_image(tmp_path) -> Image:
    """The demo guest as a bootable qcow2 disk image, registered as an image."""
    path = build_boot_disk(tmp_path)
    return Image.objects.create(name="demo-disk", kind=ImageKind.QCOW2, path=str(path))


def objects_of(kube_api, kind: str, instance: Instance) -> list[dict]:
    namespace = f"zop-{instance.project.slug}"
    return [
        body for key, body in list(kube_api.store.objects.items())
        if key[0].kind == kind and key[1] == namespace
        and key[2].startswith(instance.machine_id)
    ]  # fmt: skip


def phases_seen(kube_api) -> dict[str, list[str]]:
    """Each DataVolume's phases, in the order the store recorded them."""
    seen: dict[str, list[str]] = {}

    def record(event) -> None:  # type: ignore[no-untyped-def]
        if event.resource.kind == "DataVolume" and event.type != "DELETED":
            phases = seen.setdefault(event.object["metadata"]["name"], [])
            phase = event.object.get("status", {}).get("phase")
            if phase and (not phases or phases[-1] != phase):
                phases.append(phase)

    kube_api.store.listeners.append(record)
    return seen


def create_on(cluster_lan, operator, image: Image, **fields) -> Instance:
    return factories.demo_instance(
        actor=operator, image=image, subnet=cluster_lan, name="web", ip="10.91.0.10",
        cluster="lab", **fields,
    )  # fmt: skip


def test_an_instance_boots_from_its_root_disk_imported_from_its_image(
    celery_worker_process, kube_api, kubevirt, cluster, watching, cluster_lan, operator,
    boot_image,
):  # fmt: skip
    seen = phases_seen(kube_api)
    instance = create_on(
        cluster_lan, operator, boot_image, disks=[DiskRequest(size_gb=1, image=boot_image)]
    )
    power.instance_start(instance=instance, actor=operator)
    wait_for_state(instance, PowerState.RUNNING)
    wait_for_prompt(kubevirt, instance)  # the demo guest, booted from the imported disk

    vm = objects_of(kube_api, "VirtualMachine", instance)[0]
    templates = vm["spec"]["dataVolumeTemplates"]
    assert len(templates) == 2
    for template in templates:
        assert template["metadata"]["labels"]["zopday.io/machine"] == instance.machine_id
        url = template["spec"]["source"]["http"]["url"]
        assert f"/images/{boot_image.pk}/import/demo-boot.qcow2?link=" in url
    volumes = objects_of(kube_api, "DataVolume", instance)
    assert sorted(volume["metadata"]["name"] for volume in volumes) == sorted(
        template["metadata"]["name"] for template in templates
    )
    for volume in volumes:
        status = volume["status"]
        assert (status["phase"], status["progress"]) == ("Succeeded", "100.0%")
        conditions = {c["type"]: (c["status"], c.get("reason", "")) for c in status["conditions"]}
        assert conditions == {
            "Bound": ("True", "Bound"), "Ready": ("True", ""), "Running": ("False", "Completed"),
        }  # fmt: skip
        name = volume["metadata"]["name"]
        assert seen[name] == ["Pending", "ImportScheduled", "ImportInProgress", "Succeeded"]

    # the secondary disk holds the image too: its FAT label, read by the guest
    type_on_serial(kubevirt, instance, "dd if=/dev/vdb bs=512 count=1 2>/dev/null | "
                   f"grep -q {LABEL} && echo second-disk-$((40+2))\r")  # fmt: skip
    wait_for_serial(kubevirt, instance, b"second-disk-42")


def wait_for_serial(kubevirt, instance: Instance, text: bytes) -> None:
    node, machine = guest_of(kubevirt, instance)
    deadline = time.monotonic() + 60
    while text not in node.serial_log(machine).read_bytes():
        assert time.monotonic() < deadline, f"never saw {text!r} on the serial console"
        time.sleep(0.2)


def test_an_import_that_fails_is_the_instances_message_and_leaves_the_vm_halted(
    celery_worker_process, kube_api, kubevirt, cluster, watching, cluster_lan, operator,
    boot_image,
):  # fmt: skip
    instance = create_on(cluster_lan, operator, boot_image)
    kept = boot_image.file.with_suffix(".kept")
    boot_image.file.rename(kept)  # the console now answers 404 for it
    power.instance_start(instance=instance, actor=operator)
    instance = wait_for_state(instance, PowerState.FAILED, timeout=120)
    assert "could not import disk" in instance.power_message
    assert "expected status code 200, got 404" in instance.power_message
    kubevirt.settled()
    vm = objects_of(kube_api, "VirtualMachine", instance)[0]
    assert vm["spec"]["runStrategy"] == "Halted"
    assert vm["status"]["printableStatus"] in ("Stopped", "DataVolumeError")
    assert objects_of(kube_api, "VirtualMachineInstance", instance) == []

    # the image is back: starting again imports it anew, and the guest boots
    kept.rename(boot_image.file)
    power.instance_start(instance=instance, actor=operator)
    wait_for_state(instance, PowerState.RUNNING)
    wait_for_prompt(kubevirt, instance)
