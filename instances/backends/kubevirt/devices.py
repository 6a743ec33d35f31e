"""Device changes of a running KubeVirt machine, made as KubeVirt makes them live: a link by
the interface's `state` in the VM's spec (KubeVirt 1.5+ sets it on the running VMI), a disk by
the VM's addvolume and removevolume subresources (a blank DataVolume, hotpluggable; kept in the
VM's spec). Each waits until the VMI's status says it happened."""

import time
from collections.abc import Callable, Iterator
from typing import Any

from instances.backends.base import BackendError, DiskSpec
from instances.backends.kubevirt.manifests import CDI_VERSION, MANAGED_BY, data_volume_name
from instances.backends.kubevirt.objects import KUBEVIRT, NamespaceObjects

Body = dict[str, Any]
Watch = Callable[[NamespaceObjects, str, float], Iterator[Body]]
LIVE_TIMEOUT = 120.0  # virt-handler sets a link, or plugs a disk, in the guest
CDI = ("cdi.kubevirt.io", "v1beta1")


def _running(vmi: Body | None) -> bool:
    return vmi is not None and vmi.get("status", {}).get("phase") == "Running"


def _update_vm(objects: NamespaceObjects, machine_id: str, change: Callable[[Body], None]) -> None:
    """Change the VM's spec and write it back at the version read; read again on a conflict."""
    for _ in range(5):
        vm = objects.virtual_machine(machine_id)
        if vm is None:
            raise BackendError(f"{machine_id} has no VirtualMachine on the cluster.")
        change(vm)
        written = objects._calling(
            objects.custom.replace_namespaced_custom_object, *KUBEVIRT, objects.namespace,
            "virtualmachines", machine_id, vm, field_validation="Strict",
        )  # fmt: skip
        if written != 409:
            return
    raise BackendError(f"{machine_id} kept changing while its spec was written.", retryable=True)


def _wait(
    objects: NamespaceObjects,
    machine_id: str,
    watch: Watch,
    done: Callable[[Body], bool],
    what: str,
) -> None:
    deadline = time.monotonic() + LIVE_TIMEOUT
    while (left := deadline - time.monotonic()) > 0:
        for vmi in watch(objects, machine_id, left):
            if "deleted" in vmi or vmi.get("status", {}).get("phase") != "Running":
                raise BackendError(f"{machine_id} stopped before {what}.")
            if done(vmi):
                return
    raise BackendError(
        f"The cluster did not report {what} within {LIVE_TIMEOUT:.0f} s.", retryable=True
    )


def set_link(
    objects: NamespaceObjects, machine_id: str, nic_name: str, up: bool, watch: Watch
) -> bool:
    """The interface's state in the VM's spec, then its linkState on the VMI; False when the
    machine is off or the interface is not in its running VMI (added since it started)."""
    vmi = objects.virtual_machine_instance(machine_id)
    if not _running(vmi):
        return False
    assert vmi is not None
    if nic_name not in {i["name"] for i in vmi["spec"]["domain"]["devices"].get("interfaces", [])}:
        return False

    def change(vm: Body) -> None:
        interfaces = vm["spec"]["template"]["spec"]["domain"]["devices"].get("interfaces", [])
        for interface in interfaces:
            if interface["name"] == nic_name:
                if up:
                    interface.pop("state", None)  # up is the default, as manifests.py writes it
                else:
                    interface["state"] = "down"

    _update_vm(objects, machine_id, change)
    wanted = "up" if up else "down"
    _wait(
        objects, machine_id, watch,
        lambda vmi: any(
            item.get("name") == nic_name and item.get("linkState") == wanted
            for item in vmi.get("status", {}).get("interfaces", [])
        ),
        f"the link of {nic_name} {wanted}",
    )  # fmt: skip
    return True


def blank_data_volume(machine_id: str, disk: DiskSpec, owner: Body) -> Body:
    """A hotplugged disk's DataVolume: blank, owned by the VM so that deleting it takes the
    disk along, named as the VM's DataVolume template names it at the next start."""
    return {
        "apiVersion": CDI_VERSION,
        "kind": "DataVolume",
        "metadata": {
            "name": data_volume_name(machine_id, disk),
            "labels": dict(MANAGED_BY),
            "ownerReferences": [{
                "apiVersion": owner["apiVersion"], "kind": "VirtualMachine",
                "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
            }],
        },
        "spec": {
            "source": {"blank": {}},
            "storage": {"resources": {"requests": {"storage": f"{max(disk.size_gb, 1)}Gi"}}},
        },
    }  # fmt: skip


def _volume_ready(disk_name: str) -> Callable[[Body], bool]:
    def ready(vmi: Body) -> bool:
        for entry in vmi.get("status", {}).get("volumeStatus", []):
            if entry.get("name") == disk_name and entry.get("phase") == "Failed":
                raise BackendError(
                    f"The cluster could not plug in {disk_name}: {entry.get('message', '')}"
                )
            if entry.get("name") == disk_name and entry.get("phase") == "Ready":
                return True
        return False

    return ready


def attach_disk(
    objects: NamespaceObjects,
    machine_id: str,
    disk: DiskSpec,
    act: Callable[[str, Body], bool],
    watch: Watch,
) -> None:
    """A blank DataVolume for the disk, hotplugged through the VM's addvolume (kept in its
    spec); a machine that is off takes the disk from its spec at the next start."""
    if disk.role == "cdrom" or disk.bus != "virtio":
        raise BackendError("SATA disks and CD-ROMs can only be added while the machine is stopped.")
    if disk.source is not None:
        raise BackendError(
            "A disk made from an image can only be added while the machine is stopped."
        )
    vmi = objects.virtual_machine_instance(machine_id)
    vm = objects.virtual_machine(machine_id)
    if not _running(vmi) or vm is None:
        return
    body = blank_data_volume(machine_id, disk, vm)
    objects._calling(  # 409: made by an earlier attempt
        objects.custom.create_namespaced_custom_object, *CDI, objects.namespace, "datavolumes",
        body, field_validation="Strict",
    )  # fmt: skip
    volumes = vm["spec"]["template"]["spec"].get("volumes", [])
    if all(volume["name"] != disk.name for volume in volumes):
        device: Body = {"name": disk.name, "disk": {"bus": disk.bus}}
        if disk.serial:
            device["serial"] = disk.serial
        options = {
            "name": disk.name,
            "disk": device,
            "volumeSource": {
                "dataVolume": {"name": body["metadata"]["name"], "hotpluggable": True}
            },
        }
        act("addvolume", options)
    _wait(objects, machine_id, watch, _volume_ready(disk.name), f"{disk.name} plugged in")


def detach_disk(
    objects: NamespaceObjects,
    machine_id: str,
    disk_name: str,
    act: Callable[[str, Body], bool],
    watch: Watch,
) -> None:
    """The VM's removevolume, then the VMI's volumeStatus without it; the DataVolume is kept
    (the disk's data), deleted with the VM."""
    vm = objects.virtual_machine(machine_id)
    volumes = vm["spec"]["template"]["spec"].get("volumes", []) if vm else []
    if any(volume["name"] == disk_name for volume in volumes):
        act("removevolume", {"name": disk_name})
    if not _running(objects.virtual_machine_instance(machine_id)):
        return

    def gone(vmi: Body) -> bool:
        statuses = vmi.get("status", {}).get("volumeStatus", [])
        return all(entry.get("name") != disk_name for entry in statuses)

    _wait(objects, machine_id, watch, gone, f"{disk_name} unplugged")
