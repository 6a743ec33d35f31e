"""Disk snapshots, from the request to the host's task: take (and retry), revert, delete; what a
failure leaves, a message delivered again, work that never finished, and the start a revert holds
back. The host's backend is a stand-in here; test_qemu_offline and test_qemu_guest run qemu-img
and QEMU."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from instances import backends, tasks
from instances.backends.base import BackendError, DiskSpec
from instances.choices import DiskBus, DiskRole, Outcome, PowerState, SnapshotState
from instances.errors import ActionRefused
from instances.models import AuditEvent, Disk, DiskSnapshot, Instance
from instances.services import power, snapshot_work, snapshots

NO_SPACE = "QEMU refused blockdev-snapshot-internal-sync: no space left on device"


class SnapshottingBackend:
    """Answers each snapshot call with `answer` (raised if an error) and counts the calls."""

    name = "snapshotting"

    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.calls = 0
        self.taken: list[tuple[tuple[str, ...], str]] = []

    def _answer(self) -> object:
        self.calls += 1
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    def snapshot_disks(self, machine_id: str, disks: list[DiskSpec], snapshot_name: str) -> bool:
        self.taken.append((tuple(disk.name for disk in disks), snapshot_name))
        return bool(self._answer())

    def revert_snapshot(self, machine_id: str, disk_name: str, snapshot_name: str) -> int:
        return int(self._answer())  # type: ignore[call-overload]

    def delete_snapshot(self, machine_id: str, disk_name: str, snapshot_name: str) -> None:
        self._answer()


@pytest.fixture
def snapshot_with(on_backend, monkeypatch):
    """snapshot_with(answer, state=taking, power_state=running) -> (backend, a snapshot of the
    root disk of web-1, an instance on that backend, which counts as a hypervisor here)."""
    monkeypatch.setattr(backends, "LOCAL_BACKENDS", frozenset({"snapshotting"}))

    def make(
        answer: object, state: str = SnapshotState.TAKING, power_state: str = PowerState.RUNNING
    ) -> tuple[SnapshottingBackend, DiskSnapshot]:
        backend = SnapshottingBackend(answer)
        instance = on_backend(backend, power_state=power_state)
        snapshot = DiskSnapshot.objects.create(
            disk=instance.disks.get(), name="before-upgrade", state=state
        )
        return backend, DiskSnapshot.objects.select_related("disk__instance").get(pk=snapshot.pk)

    return make


def state_of(snapshot: DiskSnapshot) -> tuple[str, str]:
    snapshot.refresh_from_db()
    return snapshot.state, snapshot.message


# ---- take ---------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("frozen", [True, False])
def test_a_snapshot_is_ready_and_consistent_when_the_guest_was_frozen_for_it(snapshot_with, frozen):
    _, snapshot = snapshot_with(frozen)
    snapshot_work.disk_snapshot(snapshot.pk)
    snapshot.refresh_from_db()
    assert (snapshot.state, snapshot.consistent) == (SnapshotState.READY, frozen)


@pytest.mark.django_db(transaction=True)  # the task's end closes the connection, as in a worker
@pytest.mark.parametrize(("retryable", "calls"), [(False, 1), (True, 4)])
def test_a_snapshot_that_cannot_be_taken_says_why_and_the_instance_too(
    snapshot_with, retryable, calls
):
    backend, snapshot = snapshot_with(BackendError(NO_SPACE, retryable=retryable))
    assert tasks.disk_snapshot.apply(args=[snapshot.pk]).failed()
    assert backend.calls == calls  # a retryable error: the first try and three more
    assert state_of(snapshot) == (SnapshotState.FAILED, NO_SPACE)
    event = AuditEvent.objects.get(action="disk.snapshot", outcome=Outcome.FAILURE)
    assert event.message == f"Snapshot before-upgrade of web-1-root failed: {NO_SPACE}"


@pytest.mark.django_db
def test_a_failed_snapshot_keeps_its_name_and_asking_again_retries_it(
    snapshot_with, operator, django_capture_on_commit_callbacks
):
    """QEMU may finish a snapshot after the task gave up on it: a new snapshot of that name
    would then be counted as taken, holding the old disk's data. Only a retry of the failed
    one may take the name; the backend counts a snapshot it finds under it as taken."""
    backend, snapshot = snapshot_with(BackendError(NO_SPACE))
    snapshot_work.snapshot_failed(snapshot.pk, SnapshotState.TAKING, NO_SPACE)  # as the task's
    first_asked = snapshot.created_at

    backend.answer = False  # found taken: not known to be frozen
    with django_capture_on_commit_callbacks() as callbacks:
        again = snapshots.disk_snapshot(disk=snapshot.disk, actor=operator, name=snapshot.name)
    assert again.pk == snapshot.pk and len(callbacks) == 1
    assert state_of(again) == (SnapshotState.TAKING, "")
    assert again.created_at > first_asked  # it is taken now, not when first asked for
    snapshot_work.disk_snapshot(snapshot.pk)
    again.refresh_from_db()
    assert (again.state, again.consistent) == (SnapshotState.READY, False)
    assert DiskSnapshot.objects.count() == 1
    with pytest.raises(ValidationError, match="already has a snapshot called before-upgrade"):
        snapshots.disk_snapshot(disk=snapshot.disk, actor=operator, name=snapshot.name)


@pytest.mark.django_db
def test_the_snapshot_of_a_disk_detached_before_it_was_taken_fails_with_that_reason(
    snapshot_with,
):
    backend, snapshot = snapshot_with(True)
    Disk.objects.filter(pk=snapshot.disk_id).update(instance=None)
    snapshot_work.disk_snapshot(snapshot.pk)
    assert backend.calls == 0
    assert state_of(snapshot) == (SnapshotState.FAILED, "The disk was detached first.")


# ---- a message delivered again, work that never finished -----------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "work",
    [
        snapshot_work.disk_snapshot,
        snapshot_work.disk_snapshot_revert,
        snapshot_work.disk_snapshot_delete,
    ],
)
@pytest.mark.parametrize("state", [SnapshotState.READY, SnapshotState.FAILED])
def test_a_task_delivered_again_after_its_snapshot_settled_does_nothing(snapshot_with, work, state):
    """Tasks are acknowledged late: a worker that died mid-task has its message delivered again,
    maybe after the reconciler gave up on the work and the user moved on."""
    backend, snapshot = snapshot_with(3, state=state)
    work(snapshot.pk)
    assert backend.calls == 0
    assert state_of(snapshot)[0] == state


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("state", "settled", "event"),
    [
        (SnapshotState.TAKING, SnapshotState.FAILED, "Snapshot before-upgrade of web-1-root"),
        (SnapshotState.REVERTING, SnapshotState.READY, "Reverting web-1-root to before-upgrade"),
        (
            SnapshotState.DELETING,
            SnapshotState.FAILED,
            "Deleting snapshot before-upgrade of web-1-root",
        ),
    ],
)
def test_the_reconciler_fails_snapshot_work_that_never_finished(
    snapshot_with, state, settled, event
):
    _, snapshot = snapshot_with(None, state=state)
    host = snapshot.disk.instance.host
    later = timezone.now() + timedelta(seconds=snapshot_work.STUCK_AFTER_SECONDS - 5)
    snapshot_work.snapshots_settle_stuck(host, now=later)
    assert state_of(snapshot)[0] == state  # not yet

    later += timedelta(seconds=10)
    snapshot_work.snapshots_settle_stuck(host, now=later)
    reason = "The host did not finish within 20 minutes (its worker may have stopped)."
    told = f"{event} failed: {reason}"
    assert AuditEvent.objects.get(outcome=Outcome.FAILURE).message == told
    if settled == SnapshotState.READY:  # a revert that never ran leaves the snapshot as it was
        assert state_of(snapshot) == (SnapshotState.READY, "")
    else:
        assert state_of(snapshot) == (SnapshotState.FAILED, reason if "Snapshot" in event else told)


# ---- revert -------------------------------------------------------------------------------------


@pytest.fixture
def reverting(snapshot_with, operator):
    """reverting(answer, power_state, state) -> (backend, snapshot, a call asking to revert)."""

    def make(answer: object, power_state: str = PowerState.STOPPED, state: str = "ready"):  # type: ignore[no-untyped-def]
        backend, snapshot = snapshot_with(answer, state=state, power_state=power_state)

        def ask(confirm: bool = True) -> None:
            snapshots.disk_snapshot_revert(snapshot=snapshot, actor=operator, confirm=confirm)

        return backend, snapshot, ask

    return make


@pytest.mark.django_db
def test_a_stopped_instances_disk_is_reverted_to_a_snapshot_once_confirmed(
    reverting, django_capture_on_commit_callbacks
):
    backend, snapshot, ask = reverting(3)
    with pytest.raises(ActionRefused) as refused:
        ask(confirm=False)
    assert str(refused.value) == (
        "Reverting web-1-root to before-upgrade discards everything written to it since the "
        "snapshot. Confirm to continue."
    )
    with django_capture_on_commit_callbacks() as callbacks:
        ask()
    assert len(callbacks) == 1
    assert state_of(snapshot)[0] == SnapshotState.REVERTING
    event = AuditEvent.objects.get(action="disk.snapshot_revert")
    assert event.detail == {"snapshot": "before-upgrade"}

    snapshot_work.disk_snapshot_revert(snapshot.pk)
    assert backend.calls == 1
    assert state_of(snapshot)[0] == SnapshotState.READY
    assert Disk.objects.get(pk=snapshot.disk_id).size_gb == 3  # the size the disk had then


@pytest.mark.django_db
def test_an_instance_waits_for_its_disks_revert_before_it_starts(reverting, operator):
    _, snapshot, ask = reverting(3)
    ask()
    instance = Instance.objects.get(pk=snapshot.disk.instance_id)
    with pytest.raises(ActionRefused) as refused:
        power.instance_start(instance=instance, actor=operator)
    assert str(refused.value) == (
        "web-1-root is being reverted to a snapshot; start the instance after."
    )
    assert Instance.objects.get(pk=instance.pk).power_state == PowerState.STOPPED

    snapshot_work.disk_snapshot_revert(snapshot.pk)
    power.instance_start(instance=instance, actor=operator)
    assert Instance.objects.get(pk=instance.pk).power_state == PowerState.STARTING


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("power_state", "state", "message"),
    [
        (PowerState.RUNNING, "ready", "Stop the instance before reverting a disk to a snapshot."),
        (PowerState.STOPPED, "failed", "Snapshot before-upgrade failed; retry it first."),
        (PowerState.STOPPED, "taking", "Snapshot before-upgrade is being taken; wait for it."),
        (PowerState.STOPPED, "deleting", "Snapshot before-upgrade is being deleted; wait for it."),
    ],
)
def test_a_disk_is_reverted_only_when_stopped_and_to_a_taken_snapshot(
    reverting, power_state, state, message
):
    _, snapshot, ask = reverting(3, power_state, state)
    with pytest.raises(ActionRefused) as refused:
        ask()
    assert str(refused.value) == message
    assert state_of(snapshot)[0] == state
    assert not AuditEvent.objects.filter(action="disk.snapshot_revert").exists()


@pytest.mark.django_db
def test_a_revert_asked_from_a_page_older_than_a_detach_or_delete_is_refused(reverting):
    _, snapshot, ask = reverting(3)
    Disk.objects.filter(pk=snapshot.disk.pk).update(instance=None)  # what the page knew: attached
    with pytest.raises(ActionRefused) as refused:
        ask()
    assert str(refused.value) == "web-1-root is no longer attached to web-1."
    Instance.objects.filter(pk=snapshot.disk.instance.pk).delete()
    with pytest.raises(ActionRefused) as refused:
        ask()
    assert str(refused.value) == "web-1-root is no longer attached to web-1."
    assert state_of(snapshot)[0] == SnapshotState.READY


@pytest.mark.django_db(transaction=True)
def test_a_revert_that_fails_on_the_host_says_why_and_leaves_the_snapshot_ready(snapshot_with):
    refusal = BackendError("Stop the instance before reverting a disk to a snapshot.")
    _, snapshot = snapshot_with(refusal, state=SnapshotState.REVERTING)
    assert tasks.disk_snapshot_revert.apply(args=[snapshot.pk]).failed()
    assert state_of(snapshot) == (SnapshotState.READY, "")
    event = AuditEvent.objects.get(action="disk.snapshot_revert", outcome=Outcome.FAILURE)
    assert event.target_id == str(snapshot.disk.instance_id)
    assert event.message == (
        "Reverting web-1-root to before-upgrade failed: Stop the instance before reverting a "
        "disk to a snapshot."
    )


# ---- delete -------------------------------------------------------------------------------------


@pytest.fixture
def deleting(snapshot_with, operator, django_capture_on_commit_callbacks):
    """deleting(answer, state) -> (backend, a snapshot in state, its deletion asked for)."""

    def make(answer: object, state: str) -> tuple[SnapshottingBackend, DiskSnapshot]:
        backend, snapshot = snapshot_with(answer, state=state)
        with django_capture_on_commit_callbacks() as callbacks:
            snapshots.disk_snapshot_delete(snapshot=snapshot, actor=operator)
        assert len(callbacks) == 1
        assert state_of(snapshot)[0] == SnapshotState.DELETING
        return backend, snapshot

    return make


@pytest.mark.django_db
@pytest.mark.parametrize("state", [SnapshotState.READY, SnapshotState.FAILED])
def test_a_deleted_snapshot_goes_from_the_disk_then_from_the_list(deleting, state):
    backend, snapshot = deleting(None, state)
    event = AuditEvent.objects.get(action="disk.snapshot_delete")
    assert (event.detail, event.target_id) == (
        {"snapshot": "before-upgrade"},
        str(snapshot.disk_id),
    )
    snapshot_work.disk_snapshot_delete(snapshot.pk)
    assert backend.calls == 1
    assert not DiskSnapshot.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_snapshot_that_cannot_be_deleted_reads_failed_with_the_reason(snapshot_with):
    _, snapshot = snapshot_with(BackendError(NO_SPACE), state=SnapshotState.DELETING)
    assert tasks.disk_snapshot_delete.apply(args=[snapshot.pk]).failed()
    told = f"Deleting snapshot before-upgrade of web-1-root failed: {NO_SPACE}"
    assert state_of(snapshot) == (SnapshotState.FAILED, told)
    event = AuditEvent.objects.get(action="disk.snapshot_delete", outcome=Outcome.FAILURE)
    assert event.message == told


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("state", "message"),
    [
        (SnapshotState.TAKING, "Snapshot before-upgrade is being taken; wait for it."),
        (SnapshotState.REVERTING, "Snapshot before-upgrade is being reverted to; wait for it."),
        (SnapshotState.DELETING, "Snapshot before-upgrade is being deleted; wait for it."),
    ],
)
def test_a_snapshot_being_worked_on_cannot_be_deleted_or_taken_anew(
    snapshot_with, operator, state, message
):
    _, snapshot = snapshot_with(None, state=state)
    with pytest.raises(ActionRefused) as refused:
        snapshots.disk_snapshot_delete(snapshot=snapshot, actor=operator)
    assert str(refused.value) == message
    with pytest.raises(ValidationError) as invalid:
        snapshots.disk_snapshot(disk=snapshot.disk, actor=operator, name=snapshot.name)
    busy = message.replace("Snapshot before-upgrade", "it").replace("; wait for it", "")
    assert invalid.value.message_dict == {
        "name": [f"web-1-root already has a snapshot called before-upgrade; {busy}"]
    }
    assert state_of(snapshot)[0] == state
    assert not AuditEvent.objects.filter(action__startswith="disk.snapshot").exists()


# ---- instance snapshots: every disk at once ------------------------------------------------------


@pytest.fixture
def disks_of(on_backend, monkeypatch):
    """disks_of(answer) -> (backend, an instance with a root, a secondary disk and a CD-ROM)."""
    monkeypatch.setattr(backends, "LOCAL_BACKENDS", frozenset({"snapshotting"}))

    def make(answer: object) -> tuple[SnapshottingBackend, Instance]:
        backend = SnapshottingBackend(answer)
        instance = on_backend(backend, power_state=PowerState.RUNNING)
        for name, role in (("web-1-data", DiskRole.SECONDARY), ("web-1-cd", DiskRole.CDROM)):
            Disk.objects.create(
                project=instance.project, zone=instance.zone, instance=instance, name=name,
                role=role, bus=DiskBus.SATA,
            )  # fmt: skip
        return backend, instance

    return make


@pytest.mark.django_db
def test_an_instance_snapshot_takes_its_root_and_secondary_disks_together(
    disks_of, operator, django_capture_on_commit_callbacks
):
    backend, instance = disks_of(True)
    with django_capture_on_commit_callbacks() as callbacks:
        taken = snapshots.instance_snapshot(instance=instance, actor=operator, name="nightly")
    assert len(callbacks) == 1  # one task for every disk
    assert sorted(s.disk.name for s in taken) == ["web-1-data", "web-1-root"]
    snapshot_work.snapshots_take([s.pk for s in taken])
    root, data = (instance.disks.get(name=name) for name in ("web-1-root", "web-1-data"))
    # one call for both, under one freeze
    assert backend.taken == [((root.device_name, data.device_name), "nightly")]
    for snapshot in taken:
        snapshot.refresh_from_db()
        assert (snapshot.state, snapshot.consistent) == (SnapshotState.READY, True)
    assert not instance.disks.get(name="web-1-cd").snapshots.exists()
    event = AuditEvent.objects.get(action="instance.snapshot")
    assert event.message == "Snapshot nightly of web-1-root, web-1-data"


@pytest.mark.django_db
def test_an_instance_snapshot_whose_name_one_disk_has_makes_nothing(disks_of, operator):
    _, instance = disks_of(True)
    data = instance.disks.get(name="web-1-data")
    DiskSnapshot.objects.create(disk=data, name="nightly", state=SnapshotState.READY)
    with pytest.raises(ValidationError, match="web-1-data already has a snapshot called nightly"):
        snapshots.instance_snapshot(instance=instance, actor=operator, name="nightly")
    assert DiskSnapshot.objects.count() == 1  # none on the root disk either
    with pytest.raises(ValidationError, match="lowercase"):
        snapshots.instance_snapshot(instance=instance, actor=operator, name="Not OK")
    assert not AuditEvent.objects.filter(action="instance.snapshot").exists()


@pytest.mark.django_db(transaction=True)  # the task's end closes the connection, as in a worker
def test_an_instance_snapshot_that_fails_fails_on_every_disk_and_a_retry_takes_them(
    disks_of, operator, monkeypatch
):
    backend, instance = disks_of(BackendError(NO_SPACE))
    # the task runs here, not on a worker of the session that may be listening on the queue
    monkeypatch.setattr(snapshots, "enqueue_host_task", lambda *args, **kwargs: None)
    taken = snapshots.instance_snapshot(instance=instance, actor=operator, name="nightly")
    assert tasks.instance_snapshot.apply(args=[[s.pk for s in taken]]).failed()
    assert [state_of(s) for s in taken] == [(SnapshotState.FAILED, NO_SPACE)] * 2
    assert AuditEvent.objects.filter(action="disk.snapshot", outcome=Outcome.FAILURE).count() == 2

    backend.answer = False
    again = snapshots.instance_snapshot(instance=instance, actor=operator, name="nightly")
    assert sorted(s.pk for s in again) == sorted(s.pk for s in taken)
    tasks.instance_snapshot.apply(args=[[s.pk for s in again]])
    assert [state_of(s) for s in again] == [(SnapshotState.READY, "")] * 2


@pytest.mark.django_db
def test_viewers_cannot_snapshot_an_instance(disks_of, viewer):
    _, instance = disks_of(True)
    with pytest.raises(ActionRefused):
        snapshots.instance_snapshot(instance=instance, actor=viewer, name="nightly")
    assert not DiskSnapshot.objects.exists()


@pytest.mark.django_db
def test_an_instance_snapshot_takes_the_disks_still_attached_and_fails_one_detached(
    disks_of, operator
):
    backend, instance = disks_of(True)
    taken = snapshots.instance_snapshot(instance=instance, actor=operator, name="nightly")
    data = next(s for s in taken if s.disk.name == "web-1-data")
    Disk.objects.filter(pk=data.disk_id).update(instance=None)
    snapshot_work.snapshots_take([s.pk for s in taken])
    root = instance.disks.get(name="web-1-root")
    assert backend.taken == [((root.device_name,), "nightly")]
    assert state_of(data) == (SnapshotState.FAILED, "The disk was detached first.")
    assert state_of(next(s for s in taken if s is not data))[0] == SnapshotState.READY


@pytest.mark.django_db
def test_a_snapshot_of_an_instance_that_never_started_is_taken_on_a_new_disk_file(
    project, operator, subnet, settings, tmp_path
):
    """Through the host's task and the real QEMU backend (qemu-img): no guest boots."""
    from instances.backends.qemu import QemuBackend
    from instances.services.instances import instance_create
    from tests.factories import instance_request

    settings.ZOPDAY_MACHINES_DIR = tmp_path
    backends.backend_named.cache_clear()
    try:
        instance = instance_create(
            project=project, actor=operator, request=instance_request(subnet)
        )
        root = instance.disks.get(role=DiskRole.ROOT)
        snapshot = snapshots.disk_snapshot(disk=root, actor=operator, name="first")
        disk_file = tmp_path / "disks" / f"{root.device_name}.qcow2"
        assert not disk_file.exists()

        snapshot_work.disk_snapshot(snapshot.pk)

        assert state_of(snapshot) == (SnapshotState.READY, "")
        backend = backends.backend_named("qemu")
        assert isinstance(backend, QemuBackend)
        assert backend.qemu_img.snapshots(disk_file) == ["first"]
    finally:
        backends.backend_named.cache_clear()
