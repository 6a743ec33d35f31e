"""Rules of the Storage and Networking tabs' rows (a disk, a snapshot, an interface), keyed by
the action's name: the tab shows a row's button by them (a hidden refusal hides it, another
disables it with its reason) and the action's service refuses by the same rule."""

from collections.abc import Callable
from typing import Any

from instances import backend_limits
from instances.actions import configure, detach_disk, manage, revert_disk
from instances.allowed import YES, Allowed, role_check
from instances.choices import DiskRole, PowerState, Role, SnapshotState
from instances.models import Disk, DiskSnapshot, NetworkInterface

SNAPSHOT_ROLES = (DiskRole.ROOT, DiskRole.SECONDARY)
SNAPSHOT_BUSY: dict[str, str] = {
    SnapshotState.TAKING: "is being taken",
    SnapshotState.REVERTING: "is being reverted to",
    SnapshotState.DELETING: "is being deleted",
}


def disk_change(disk: Disk, role: Role | None) -> Allowed:
    """An attached disk changes with its instance's rules, a free one with the project's."""
    return configure(disk.instance, role) if disk.instance else manage(role)


def disk_detach(disk: Disk, role: Role | None) -> Allowed:
    instance = disk.instance
    if instance is None:
        return Allowed(False, f"{disk.name} is not attached.", hidden=True)
    if not (allowed := configure(instance, role)):
        return allowed
    if disk.role == DiskRole.ROOT:  # whatever the instance's state: it is never detached
        return Allowed(
            False,
            f"{disk.name} is {instance.name}'s root disk, which stays with it: snapshot it, or "
            "delete the instance.",
            hidden=True,
        )
    return detach_disk(instance, role)


def disk_resize(disk: Disk, role: Role | None) -> Allowed:
    if not (allowed := disk_change(disk, role)):
        return allowed
    if disk.role not in (DiskRole.ROOT, DiskRole.SECONDARY):
        return Allowed(
            False, "Only root and secondary disks can be resized.", hidden=True, field="size_gb"
        )
    return YES


def disk_snapshot(disk: Disk, role: Role | None) -> Allowed:
    if disk.instance is None:
        return Allowed(False, "Attach the disk to an instance to snapshot it.", hidden=True)
    if not (allowed := configure(disk.instance, role)):
        return allowed
    if disk.role not in SNAPSHOT_ROLES:
        return Allowed(
            False, "Only root and secondary disks have snapshots.", hidden=True, field="disk"
        )
    return YES


def cdrom_change(disk: Disk, role: Role | None) -> Allowed:
    """Insert or eject a CD-ROM drive's media."""
    if disk.role != DiskRole.CDROM:
        return Allowed(False, f"{disk.name} is not a CD-ROM drive.", hidden=True, field="disk")
    if not (allowed := disk_change(disk, role)):
        return allowed
    return backend_limits.media_change(disk)


def _snapshot_busy(snapshot: DiskSnapshot) -> Allowed:
    if snapshot.state in SNAPSHOT_BUSY:
        busy = SNAPSHOT_BUSY[snapshot.state]
        return Allowed(False, f"Snapshot {snapshot.name} {busy}; wait for it.", hidden=True)
    return YES


def snapshot_retry(snapshot: DiskSnapshot, role: Role | None) -> Allowed:
    """Take a failed snapshot again, under its name."""
    if not (allowed := disk_snapshot(snapshot.disk, role)):
        return allowed
    if snapshot.state != SnapshotState.FAILED:
        return Allowed(False, f"Snapshot {snapshot.name} has not failed.", hidden=True)
    return YES


def snapshot_revert(snapshot: DiskSnapshot, role: Role | None) -> Allowed:
    instance = snapshot.disk.instance
    if instance is None:
        return Allowed(
            False, "Attach the disk to an instance to revert it to a snapshot.", hidden=True
        )
    if not (allowed := role_check(role, Role.OPERATOR)):
        return allowed
    if snapshot.state == SnapshotState.FAILED:
        return Allowed(False, f"Snapshot {snapshot.name} failed; retry it first.", hidden=True)
    if not (allowed := _snapshot_busy(snapshot)):
        return allowed
    return revert_disk(instance, role)


def snapshot_delete(snapshot: DiskSnapshot, role: Role | None) -> Allowed:
    instance = snapshot.disk.instance
    if instance is None:
        return Allowed(
            False, "Attach the disk to an instance to delete its snapshots.", hidden=True
        )
    if not (allowed := configure(instance, role)):
        return allowed
    return _snapshot_busy(snapshot)


def nic_remove(nic: NetworkInterface, role: Role | None) -> Allowed:
    if not (allowed := configure(nic.instance, role)):
        return allowed
    if nic.primary:
        return Allowed(
            False,
            f"{nic.name} is the primary interface: an instance keeps it. Take its link down, "
            "or change its subnet by creating the instance anew.",
            hidden=True,
        )
    if nic.instance.power_state != PowerState.STOPPED:
        return Allowed(False, "Stop the instance before removing an interface.", hidden=True)
    return YES


def nic_link(nic: NetworkInterface, role: Role | None) -> Allowed:
    return configure(nic.instance, role)


def eip_associate(nic: NetworkInterface, role: Role | None) -> Allowed:
    """An Elastic IP routes to one interface's private IPv4 address."""
    if not (allowed := manage(role)):
        return allowed
    if hasattr(nic, "elastic_ip"):
        return Allowed(False, f"{nic} already has an Elastic IP.", hidden=True, field="nic")
    if not nic.ipv4:
        reason = f"{nic} has no private IPv4 address to route to."
        return Allowed(False, reason, hidden=True, field="nic")
    return YES


def eip_release(nic: NetworkInterface, role: Role | None) -> Allowed:
    if not (allowed := manage(role)):
        return allowed
    if not hasattr(nic, "elastic_ip"):
        return Allowed(False, f"{nic} has no Elastic IP.", hidden=True, field="nic")
    return YES


DISK_RULES: dict[str, Callable[[Any, Role | None], Allowed]] = {
    "detach": disk_detach,
    "resize": disk_resize,
    "snapshot": disk_snapshot,
    "cdrom": cdrom_change,
}
SNAPSHOT_RULES: dict[str, Callable[[Any, Role | None], Allowed]] = {
    "retry": snapshot_retry,
    "revert": snapshot_revert,
    "delete": snapshot_delete,
}
NIC_RULES: dict[str, Callable[[Any, Role | None], Allowed]] = {
    "remove": nic_remove,
    "link": nic_link,
    "associate_eip": eip_associate,
    "release_eip": eip_release,
}


def row_allowed(
    rules: dict[str, Callable[[Any, Role | None], Allowed]], row: object, role: Role | None
) -> dict[str, Allowed]:
    """What may be done to one row now: the tab's template reads its buttons from this."""
    return {name: rule(row, role) for name, rule in rules.items()}
