"""Disk snapshots as users ask for them: take (or retry), revert a disk to one, delete.

Each request moves the snapshot into a transitional state (taking, reverting, deleting) with a
conditional UPDATE and queues the work on the instance's host, which acts only while that state
holds (see machines.disk_snapshot and the two after it). A snapshot that failed keeps its name:
QEMU may still finish writing it, and a new snapshot must never be taken for that one.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from instances import actions, row_rules
from instances.access import project_role
from instances.choices import SnapshotState
from instances.errors import ActionRefused
from instances.models import Disk, DiskSnapshot, Instance
from instances.row_rules import SNAPSHOT_BUSY as BUSY
from instances.row_rules import SNAPSHOT_ROLES
from instances.services.audit import audit_record
from instances.services.queueing import enqueue_host_task
from instances.validators import validate_dns_label


def disk_snapshot(*, disk: Disk, actor: AbstractBaseUser, name: str) -> DiskSnapshot:
    """Snapshot a disk; the guest's filesystems are frozen around it when it runs. The name of
    a failed snapshot retries it: the host counts one QEMU finished late as taken."""
    actions.require(row_rules.disk_snapshot(disk, project_role(actor, disk.project)))
    assert disk.instance is not None  # the rule refuses a free disk's
    _check_name(name)
    with transaction.atomic():
        snapshot = _reserve(disk, name)
        audit_record(actor=actor, action="disk.snapshot", project=disk.project, target=snapshot)
        enqueue_host_task(disk.instance, "instances.disk_snapshot", snapshot.pk)
    return snapshot


def instance_snapshot(
    *, instance: Instance, actor: AbstractBaseUser, name: str
) -> list[DiskSnapshot]:
    """Snapshot every root and secondary disk of the instance under one name, together: one
    freeze of the guest's filesystems around all of them when it runs, so they agree with each
    other. The name must be free on every disk (or a failed snapshot's there, which retries it)."""
    actions.require(actions.configure(instance, project_role(actor, instance.project)))
    _check_name(name)
    disks = list(instance.disks.filter(role__in=SNAPSHOT_ROLES).order_by("pk"))
    if not disks:
        raise ValidationError({"name": "The instance has no root or secondary disk to snapshot."})
    with transaction.atomic():
        taken = [_reserve(disk, name) for disk in disks]
        audit_record(
            actor=actor, action="instance.snapshot", project=instance.project, target=instance,
            message=f"Snapshot {name} of {', '.join(disk.name for disk in disks)}",
        )  # fmt: skip
        enqueue_host_task(instance, "instances.instance_snapshot", [s.pk for s in taken])
    return taken


def _check_name(name: str) -> None:
    try:
        validate_dns_label(name)
    except ValidationError as error:
        raise ValidationError({"name": error.messages}) from None


def _reserve(disk: Disk, name: str) -> DiskSnapshot:
    """The disk's new snapshot of that name, taking; or its failed one of that name, taking
    again. Inside the caller's transaction."""
    taken = ValidationError({"name": f"{disk.name} already has a snapshot called {name}."})
    now = timezone.now()
    failed = disk.snapshots.filter(name=name, state=SnapshotState.FAILED)
    if failed.update(state=SnapshotState.TAKING, message="", created_at=now, state_changed_at=now):
        return disk.snapshots.get(name=name)
    if existing := disk.snapshots.filter(name=name).first():
        if existing.state in BUSY:
            busy = f"{disk.name} already has a snapshot called {name}; it "
            raise ValidationError({"name": busy + f"{BUSY[existing.state]}."})
        raise taken
    try:  # the same name asked for twice at once: the unique constraint picks one
        with transaction.atomic():
            return DiskSnapshot.objects.create(disk=disk, name=name)
    except IntegrityError:
        raise taken from None


def disk_snapshot_revert(
    *, snapshot: DiskSnapshot, actor: AbstractBaseUser, confirm: bool = False
) -> None:
    """Bring a stopped instance's disk back to a ready snapshot, on its host; the instance
    cannot start until it is done. What the disk held since is lost: it needs a confirmation."""
    disk = snapshot.disk
    role = project_role(actor, disk.project)
    actions.require(row_rules.snapshot_revert(snapshot, role))
    assert disk.instance is not None  # the rule refuses a free disk's
    if not confirm:
        raise ActionRefused(
            f"Reverting {disk.name} to {snapshot.name} discards everything written to it since "
            "the snapshot. Confirm to continue."
        )
    with transaction.atomic():
        # the instance's row lock, which Start's claim takes too: a start asked at the same
        # moment either waits for this revert and is refused, or goes first and this is
        instance = Instance.objects.select_for_update().filter(pk=disk.instance.pk).first()
        if instance is None or not instance.disks.filter(pk=disk.pk).exists():
            raise ActionRefused(f"{disk.name} is no longer attached to {disk.instance.name}.")
        actions.require(actions.revert_disk(instance, role))
        _claim(snapshot, (SnapshotState.READY,), SnapshotState.REVERTING)
        audit_record(
            actor=actor, action="disk.snapshot_revert", project=disk.project, target=disk,
            detail={"snapshot": snapshot.name},
        )  # fmt: skip
        enqueue_host_task(disk.instance, "instances.disk_snapshot_revert", snapshot.pk)


def disk_snapshot_delete(*, snapshot: DiskSnapshot, actor: AbstractBaseUser) -> None:
    """Delete a snapshot from its disk; its record goes once the host has removed it (until
    then it reads Deleting and keeps its name). A failed one goes too, with whatever QEMU
    wrote of it late."""
    disk = snapshot.disk
    actions.require(row_rules.snapshot_delete(snapshot, project_role(actor, disk.project)))
    assert disk.instance is not None  # the rule refuses a free disk's
    with transaction.atomic():
        _claim(snapshot, (SnapshotState.READY, SnapshotState.FAILED), SnapshotState.DELETING)
        audit_record(
            actor=actor, action="disk.snapshot_delete", project=disk.project, target=disk,
            detail={"snapshot": snapshot.name},
        )  # fmt: skip
        enqueue_host_task(disk.instance, "instances.disk_snapshot_delete", snapshot.pk)


def reverting_disks(instance_id: int) -> list[str]:
    """The names of the instance's disks being reverted to a snapshot: it may not start yet."""
    rows = DiskSnapshot.objects.filter(disk__instance_id=instance_id, state=SnapshotState.REVERTING)
    return list(rows.values_list("disk__name", flat=True))


def _require_not_busy(snapshot: DiskSnapshot) -> None:
    if snapshot.state in BUSY:
        raise ActionRefused(f"Snapshot {snapshot.name} {BUSY[snapshot.state]}; wait for it.")


def _claim(snapshot: DiskSnapshot, sources: tuple[str, ...], state: str) -> None:
    """Move the snapshot from one of sources into state, or refuse: another request did first."""
    now = timezone.now()
    rows = DiskSnapshot.objects.filter(pk=snapshot.pk, state__in=sources)
    if not rows.update(state=state, message="", state_changed_at=now):
        snapshot.refresh_from_db(fields=["state"])
        _require_not_busy(snapshot)
        raise ActionRefused(f"Snapshot {snapshot.name} is {snapshot.get_state_display().lower()}.")
    snapshot.state, snapshot.message, snapshot.state_changed_at = state, "", now
