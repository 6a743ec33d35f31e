"""The host's side of disk snapshots: take, revert to, delete; and what a failure leaves.

Each task acts only while the snapshot is in the state its request set (taking, reverting,
deleting), and settles it with a conditional UPDATE from that state: a message delivered again
after the work was done, or after the reconciler gave up on it, changes nothing.
"""

from datetime import datetime, timedelta

from django.db.models import QuerySet
from django.utils import timezone

from instances.backends import backend_named
from instances.backends.base import Backend, BackendError
from instances.choices import Outcome, SnapshotState
from instances.holds import fail_point, hold_point
from instances.models import Disk, DiskSnapshot
from instances.services.audit import audit_record
from instances.specs import disk_spec

# a state a host's task did not move on from within this long is stuck (its worker stopped):
# well past a snapshot's four tries of freeze and write (60 s each) and their backoffs
STUCK_AFTER_SECONDS = 20 * 60

# what failed, by the state it failed in: the action of its event and the words
WORK: dict[str, tuple[str, str]] = {
    SnapshotState.TAKING: ("disk.snapshot", "Snapshot {name} of {disk}"),
    SnapshotState.REVERTING: ("disk.snapshot_revert", "Reverting {disk} to {name}"),
    SnapshotState.DELETING: ("disk.snapshot_delete", "Deleting snapshot {name} of {disk}"),
}


def disk_snapshot(snapshot_id: int) -> None:
    """Take the snapshot; it is consistent when the guest froze its filesystems for it."""
    snapshots_take([snapshot_id])


def snapshots_take(snapshot_ids: list[int]) -> None:
    """Take snapshots of one name on disks of one instance together, under one freeze (an
    instance snapshot): all of them or none. Those no longer taking are left alone; one whose
    disk was detached meanwhile fails, saying so."""
    rows = DiskSnapshot.objects.select_related("disk__instance", "disk__image")
    taking = list(rows.filter(pk__in=snapshot_ids, state=SnapshotState.TAKING).order_by("pk"))
    instance = next((s.disk.instance for s in taking if s.disk.instance is not None), None)
    for snapshot in taking:  # detached meanwhile (and maybe attached to another instance)
        if instance is None or snapshot.disk.instance_id != instance.pk:
            snapshot_failed(snapshot.pk, SnapshotState.TAKING, "The disk was detached first.")
    taking = [s for s in taking if instance is not None and s.disk.instance_id == instance.pk]
    if instance is None or not taking:
        return
    if fail_point("snapshot.take"):
        raise BackendError("Failed at the test's point snapshot.take.", retryable=True)
    frozen = backend_named(instance.backend).snapshot_disks(
        instance.machine_id, [disk_spec(s.disk) for s in taking], taking[0].name
    )
    hold_point("snapshot.taken")
    DiskSnapshot.objects.filter(pk__in=[s.pk for s in taking], state=SnapshotState.TAKING).update(
        state=SnapshotState.READY, consistent=frozen, state_changed_at=timezone.now()
    )


def disk_snapshot_revert(snapshot_id: int) -> None:
    """Bring the stopped machine's disk back to the snapshot; the disk is the size it was then."""
    if (work := _work(snapshot_id, SnapshotState.REVERTING)) is None:
        return
    snapshot, machine_id, backend = work
    size_gb = backend.revert_snapshot(machine_id, snapshot.disk.device_name, snapshot.name)
    Disk.objects.filter(pk=snapshot.disk_id).update(size_gb=size_gb)
    _settle(snapshot_id, SnapshotState.REVERTING).update(
        state=SnapshotState.READY, state_changed_at=timezone.now()
    )


def disk_snapshot_delete(snapshot_id: int) -> None:
    """Remove the snapshot from its disk, then its record."""
    if (work := _work(snapshot_id, SnapshotState.DELETING)) is None:
        return
    snapshot, machine_id, backend = work
    backend.delete_snapshot(machine_id, snapshot.disk.device_name, snapshot.name)
    _settle(snapshot_id, SnapshotState.DELETING).delete()


TASK_STATES = {
    "instances.disk_snapshot": SnapshotState.TAKING,
    "instances.instance_snapshot": SnapshotState.TAKING,
    "instances.disk_snapshot_revert": SnapshotState.REVERTING,
    "instances.disk_snapshot_delete": SnapshotState.DELETING,
}


def snapshot_failed(snapshot_id: int, state: str, message: str) -> None:
    """Record that the work of `state` failed for good, on the snapshot and its instance's events.

    A failed take or delete leaves it Failed, keeping its name (QEMU may yet finish the work; asking
    again retries it); a failed revert leaves it Ready."""
    snapshot = DiskSnapshot.objects.select_related("disk__project").filter(pk=snapshot_id).first()
    if snapshot is None or snapshot.state != state:
        return
    action, work = WORK[state]
    told = f"{work.format(name=snapshot.name, disk=snapshot.disk.name)} failed: {message}"
    settled = SnapshotState.READY if state == SnapshotState.REVERTING else SnapshotState.FAILED
    recorded = message if state == SnapshotState.TAKING else told
    if not _settle(snapshot_id, state).update(
        state=settled,
        message="" if settled == SnapshotState.READY else recorded[:300],
        state_changed_at=timezone.now(),
    ):
        return
    audit_record(
        actor=None,
        action=action,
        project=snapshot.disk.project,
        target=snapshot.disk.instance or snapshot.disk,
        outcome=Outcome.FAILURE,
        message=told,
    )


def stuck_snapshots(host: str, now: datetime | None = None) -> QuerySet[DiskSnapshot]:
    """Snapshot work of this host's instances ("": a cluster's) that ran out of time."""
    before = (now or timezone.now()) - timedelta(seconds=STUCK_AFTER_SECONDS)
    return DiskSnapshot.objects.filter(
        disk__instance__host=host, state__in=list(WORK), state_changed_at__lt=before
    )


def snapshots_settle_stuck(host: str, now: datetime | None = None) -> None:
    """Snapshots of this host's instances whose work did not finish in STUCK_AFTER_SECONDS
    (its worker stopped, its message was lost) fail with that reason: the user can retry or
    delete them, and an instance waiting for a revert can start again."""
    stuck = stuck_snapshots(host, now)
    minutes = STUCK_AFTER_SECONDS // 60
    for snapshot_id, state in stuck.values_list("pk", "state"):
        message = f"The host did not finish within {minutes} minutes (its worker may have stopped)."
        snapshot_failed(snapshot_id, state, message)


def _work(snapshot_id: int, state: str) -> tuple[DiskSnapshot, str, Backend] | None:
    """The snapshot while it is in `state`, its machine and backend; None when it moved on, or
    when its disk was detached meanwhile (its machine's folder holds the disk's file: the work
    fails, saying so)."""
    rows = DiskSnapshot.objects.select_related("disk__instance")
    snapshot = rows.filter(pk=snapshot_id, state=state).first()
    if snapshot is None:
        return None
    instance = snapshot.disk.instance
    if instance is None:
        snapshot_failed(snapshot_id, state, "The disk was detached first.")
        return None
    return snapshot, instance.machine_id, backend_named(instance.backend)


def _settle(snapshot_id: int, state: str) -> QuerySet[DiskSnapshot]:
    return DiskSnapshot.objects.filter(pk=snapshot_id, state=state)
