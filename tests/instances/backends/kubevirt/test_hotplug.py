"""A disk added to a running instance on a cluster is hotplugged as KubeVirt does it: a blank
DataVolume, the VM's addvolume subresource (the volume kept in the VM's spec, hotpluggable),
the fake's virt-handler plugging it into the real QEMU guest and saying so in the VMI's
volumeStatus; removevolume unplugs it from the guest."""

import re
import time

import pytest

from instances.backends import backend_named
from instances.choices import PowerState
from instances.services import power, storage
from tests.fakes.kubevirt.fixtures import (
    create,
    guest_of,
    type_on_serial,
    wait_for_prompt,
    wait_for_state,
)
from tests.fakes.kubevirt.store import BY_KIND

DATA_VOLUME = BY_KIND["DataVolume"]
pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def objects_of(kube_api, instance, kind: str) -> dict | None:
    namespace = f"zop-{instance.project.slug}"
    return next(
        (body for key, body in kube_api.store.objects.items()
         if key[0].kind == kind and key[1:] == (namespace, instance.machine_id)),
        None,
    )  # fmt: skip


def guest_disks(kubevirt, instance, mark: str) -> str:
    """The guest's virtio disks with their serials and sizes (512-byte sectors), as sysfs
    lists them on its serial console (the demo guest has no lsblk)."""
    node, machine = guest_of(kubevirt, instance)
    listing = 'for d in /sys/block/vd*; do echo "${d##*/} $(cat $d/serial) $(cat $d/size)"; done'
    type_on_serial(kubevirt, instance, f"echo {mark}-start; {listing}; echo {mark}-end\r")
    pattern = re.compile(rf"\n{mark}-start\r?\n(.*?){mark}-end".encode(), re.S)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if found := pattern.search(node.serial_log(machine).read_bytes()):
            return found.group(1).decode()
        time.sleep(0.3)
    raise AssertionError(f"the guest never listed its disks ({mark})")


def wait_for_disks(kubevirt, instance, mark: str, seen) -> str:
    """The guest's listing once `seen` holds for it: the guest takes a moment to probe a
    disk plugged in, or to let go of one unplugged."""
    for attempt in range(20):
        listed = guest_disks(kubevirt, instance, f"{mark}{attempt}")
        if seen(listed):
            return listed
        time.sleep(1)
    raise AssertionError(f"the guest's disks never as wanted ({mark}): {listed}")


def wait_until(condition, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.3)


def test_a_disk_hotplugged_into_a_running_cluster_instance_appears_and_goes_in_its_guest(
    celery_worker_process, kube_api, kubevirt, cluster, watching, cluster_lan, operator
):
    instance = create(operator, cluster_lan)
    power.instance_start(instance=instance, actor=operator)
    instance = wait_for_state(instance, PowerState.RUNNING)
    wait_for_prompt(kubevirt, instance)
    assert "hotdata" not in guest_disks(kubevirt, instance, "before")

    disk = storage.disk_add(instance=instance, actor=operator, name="hotdata", size_gb=2)

    def ready() -> dict | None:
        vmi = objects_of(kube_api, instance, "VirtualMachineInstance") or {}
        return next(
            (entry for entry in vmi.get("status", {}).get("volumeStatus", [])
             if entry["name"] == disk.device_name and entry.get("phase") == "Ready"),
            None,
        )  # fmt: skip

    wait_until(lambda: ready() is not None, "plugged in")
    assert ready()["hotplugVolume"]["attachPodName"].startswith("hp-volume-")
    vm = objects_of(kube_api, instance, "VirtualMachine")
    [volume] = [
        v for v in vm["spec"]["template"]["spec"]["volumes"] if v["name"] == disk.device_name
    ]
    data_volume = volume["dataVolume"]
    assert data_volume["hotpluggable"] is True
    namespace = f"zop-{instance.project.slug}"
    made = kube_api.store.find(DATA_VOLUME, namespace, data_volume["name"])
    assert made["spec"]["source"] == {"blank": {}}
    assert made["spec"]["storage"]["resources"]["requests"]["storage"] == "2Gi"
    wanted = re.compile(rf"^vd[b-z] hotdata {2 * 2**21}\r?$", re.M)  # 2 GiB in sectors
    wait_for_disks(kubevirt, instance, "plugged", lambda listed: wanted.search(listed))

    backend_named("kubevirt").detach_disk(instance.machine_id, disk.device_name)
    vm = objects_of(kube_api, instance, "VirtualMachine")
    names = {v["name"] for v in vm["spec"]["template"]["spec"]["volumes"]}
    assert disk.device_name not in names
    wait_for_disks(kubevirt, instance, "gone", lambda listed: "hotdata" not in listed)
    assert kube_api.store.find(DATA_VOLUME, namespace, data_volume["name"])  # its data is kept
