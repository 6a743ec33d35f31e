"""What the worker does to a machine's devices: links, disks, CD-ROM media, and the files of
machines and disks deleted with their instances. Like the power work, each reads the row as it
is now and leaves the instance alone once it no longer runs."""

from collections.abc import Sequence

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from instances.backends import backend_named
from instances.choices import CarrierState, LinkState, Outcome, PowerState
from instances.models import Disk, Instance, NetworkInterface
from instances.services import snapshot_work
from instances.services.audit import audit_record
from instances.specs import disk_spec, machine_spec


def machine_set_link(nic_id: int) -> None:
    """Set the link as the NIC's row wants it, then look again: two quick toggles run as two
    tasks, and the one that finishes last must leave the link as the row says."""
    applied = None
    for _ in range(5):
        nic = NetworkInterface.objects.select_related("instance").filter(pk=nic_id).first()
        if nic is None or nic.instance.power_state != PowerState.RUNNING:
            return
        up = nic.link_desired == LinkState.UP
        if up == applied:
            break
        if not backend_named(nic.instance.backend).set_link(nic.instance.machine_id, nic.name, up):
            return  # not in the running machine: its carrier is read at the next start
        applied = up
        NetworkInterface.objects.filter(pk=nic_id).update(
            carrier=CarrierState.UP if up else CarrierState.DOWN, link_changed_at=timezone.now()
        )


def disk_hotplug(disk_id: int) -> None:
    disk = Disk.objects.select_related("instance", "image").filter(pk=disk_id).first()
    if disk is None or disk.instance is None or disk.instance.power_state != PowerState.RUNNING:
        return
    backend_named(disk.instance.backend).attach_disk(machine_spec(disk.instance), disk_spec(disk))


def disk_resize(disk_id: int) -> None:
    disk = Disk.objects.select_related("instance", "image").filter(pk=disk_id).first()
    if disk is None or disk.instance is None:
        return
    backend_named(disk.instance.backend).resize_disk(machine_spec(disk.instance), disk_spec(disk))


# what a device task was doing, for the event that says it failed: its model, and the words
DEVICE_WORK: dict[str, tuple[type[Disk] | type[NetworkInterface], str]] = {
    "instances.disk_hotplug": (Disk, "Plugging in {name}"),
    "instances.disk_resize": (Disk, "Growing {name}"),
    "instances.cdrom_change": (Disk, "Changing the media in {name}"),
    "instances.nic_set_link": (NetworkInterface, "Setting the link of {name}"),
}


def device_task_failed(task_name: str, object_id: int | list[int], message: str) -> None:
    """A device task failed for good: its instance's events say what did not happen and why
    (a snapshot says so too; an instance snapshot's are each given by id). Work on a deleted
    instance's files leaves the log alone."""
    if task_name in snapshot_work.TASK_STATES:
        for snapshot_id in object_id if isinstance(object_id, list) else [object_id]:
            snapshot_work.snapshot_failed(
                snapshot_id, snapshot_work.TASK_STATES[task_name], message
            )
        return
    if task_name not in DEVICE_WORK:
        return
    assert isinstance(object_id, int)
    model, work = DEVICE_WORK[task_name]
    device = model._default_manager.select_related("instance__project").filter(pk=object_id).first()
    if device is None or device.instance is None:
        return
    told = f"{work.format(name=device.name)} failed: {message}"
    if task_name == "instances.disk_hotplug" and isinstance(device, Disk):
        told = hotplug_failed(device, told)
    audit_record(
        actor=None,
        action=task_name.replace("instances.", "instance."),
        project=device.instance.project,
        target=device.instance,
        outcome=Outcome.FAILURE,
        message=told,
    )


def hotplug_failed(disk: Disk, told: str) -> str:
    """A disk the running machine never took is not recorded attached: it is left free, its row
    saying why, and its plug is given back (the backend removed any file it made)."""
    instance = disk.instance
    assert instance is not None
    with transaction.atomic():
        if not Disk.objects.filter(pk=disk.pk, instance=instance).update(
            instance=None, message=told[:300]
        ):
            return told
        Instance.objects.filter(pk=instance.pk).update(
            hotplugged_disks=Greatest(F("hotplugged_disks") - 1, 0)
        )
    return f"{told} {disk.name} was left detached."


def cdrom_change(disk_id: int) -> None:
    disk = Disk.objects.select_related("instance", "image").filter(pk=disk_id).first()
    if disk is None or disk.instance is None or disk.instance.power_state != PowerState.RUNNING:
        return
    iso = disk.image.file if disk.image else None
    backend_named(disk.instance.backend).change_cdrom(
        disk.instance.machine_id, disk.device_name, iso
    )


def disk_file_delete(backend_name: str, disk_name: str) -> None:
    backend_named(backend_name).delete_disk(disk_name)


def machine_undefine(backend_name: str, machine_id: str, disk_names: Sequence[str] = ()) -> None:
    """Remove a deleted instance's machine, then the files of the disks that went with it."""
    backend = backend_named(backend_name)
    backend.undefine(machine_id)
    for name in disk_names:
        backend.delete_disk(name)
