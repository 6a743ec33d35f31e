"""Device tasks on the worker: a snapshot's record says whether the guest was frozen for it; errors
the backend calls retryable are tried again; a task that fails for good says so on the instance
(and a snapshot's record keeps its name, failed, until asked for again)."""

import pytest
from django.core.exceptions import ValidationError

from instances import backends, tasks
from instances.backends.base import BackendError
from instances.choices import CarrierState, LinkState, Outcome, PowerState, SnapshotState
from instances.errors import ActionRefused
from instances.models import AuditEvent, Disk, DiskSnapshot, Instance, NetworkInterface
from instances.services import machines, storage


class SnapshottingBackend:
    name = "snapshotting"

    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.calls = 0

    def _answer(self) -> bool:
        self.calls += 1
        if isinstance(self.answer, BaseException):
            raise self.answer
        return bool(self.answer)

    def snapshot_disk(self, machine_id: str, disk_name: str, snapshot_name: str) -> bool:
        return self._answer()

    def delete_snapshot(self, machine_id: str, disk_name: str, snapshot_name: str) -> None:
        self._answer()

    def revert_snapshot(self, machine_id: str, disk_name: str, snapshot_name: str) -> None:
        self._answer()

    def attach_disk(self, spec, disk) -> None:  # type: ignore[no-untyped-def]
        self._answer()


@pytest.fixture
def snapshot_with(on_backend):
    """snapshot_with(answer) -> (backend, snapshot asked for of a running instance's root disk)."""

    def make(answer: object) -> tuple[SnapshottingBackend, DiskSnapshot]:
        backend = SnapshottingBackend(answer)
        instance = on_backend(backend, power_state=PowerState.RUNNING)
        snapshot = DiskSnapshot.objects.create(disk=instance.disks.get(), name="before-upgrade")
        return backend, snapshot

    return make


@pytest.mark.django_db
@pytest.mark.parametrize("frozen", [True, False])
def test_a_snapshot_is_ready_and_consistent_when_the_guest_was_frozen_for_it(snapshot_with, frozen):
    _, snapshot = snapshot_with(frozen)
    assert snapshot.state == SnapshotState.TAKING
    machines.disk_snapshot(snapshot.pk)
    snapshot.refresh_from_db()
    assert (snapshot.state, snapshot.consistent) == (SnapshotState.READY, frozen)


NO_SPACE = "QEMU refused blockdev-snapshot-internal-sync: no space left on device"


@pytest.mark.django_db(transaction=True)  # the task's end closes the connection, as in a worker
@pytest.mark.parametrize(("retryable", "calls"), [(False, 1), (True, 4)])
def test_a_snapshot_that_cannot_be_taken_says_why_and_the_instance_too(
    snapshot_with, retryable, calls
):
    backend, snapshot = snapshot_with(BackendError(NO_SPACE, retryable=retryable))
    assert tasks.disk_snapshot.apply(args=[snapshot.pk]).failed()
    assert backend.calls == calls  # a retryable error: the first try and three more
    snapshot.refresh_from_db()
    assert (snapshot.state, snapshot.message) == (SnapshotState.FAILED, NO_SPACE)
    event = AuditEvent.objects.get(action="disk.snapshot", outcome=Outcome.FAILURE)
    assert event.message == f"Snapshot before-upgrade of web-1-root failed: {NO_SPACE}"


@pytest.mark.django_db
def test_a_failed_snapshot_keeps_its_name_and_asking_again_retries_it(
    snapshot_with, operator, monkeypatch, django_capture_on_commit_callbacks
):
    """QEMU may finish a snapshot after the task gave up on it: a new snapshot of that name
    would then be counted as taken, holding the old disk's data. Only a retry of the failed
    one may take the name; the backend counts a snapshot it finds under it as taken."""
    monkeypatch.setattr(backends, "LOCAL_BACKENDS", frozenset({"snapshotting"}))  # users' disks
    backend, snapshot = snapshot_with(BackendError(NO_SPACE))
    machines.device_task_failed("instances.disk_snapshot", snapshot.pk, NO_SPACE)  # as the task

    backend.answer = False  # found taken: not known to be frozen
    with django_capture_on_commit_callbacks() as callbacks:
        again = storage.disk_snapshot(disk=snapshot.disk, actor=operator, name=snapshot.name)
    assert again.pk == snapshot.pk and len(callbacks) == 1
    again.refresh_from_db()
    assert (again.state, again.message) == (SnapshotState.TAKING, "")
    machines.disk_snapshot(snapshot.pk)
    again.refresh_from_db()
    assert (again.state, again.consistent) == (SnapshotState.READY, False)
    assert DiskSnapshot.objects.count() == 1
    with pytest.raises(ValidationError, match="already has a snapshot called before-upgrade"):
        storage.disk_snapshot(disk=snapshot.disk, actor=operator, name=snapshot.name)


@pytest.mark.django_db
def test_the_snapshot_of_a_disk_detached_before_it_was_taken_fails_with_that_reason(
    snapshot_with,
):
    backend, snapshot = snapshot_with(True)
    Disk.objects.filter(pk=snapshot.disk_id).update(instance=None)
    machines.disk_snapshot(snapshot.pk)
    snapshot.refresh_from_db()
    assert backend.calls == 0
    assert (snapshot.state, snapshot.message) == (
        SnapshotState.FAILED,
        "The disk was detached before it could be taken.",
    )


@pytest.fixture
def deleting(snapshot_with, operator, monkeypatch, django_capture_on_commit_callbacks):
    """deleting(answer, state) -> (backend, a snapshot in state, its deletion asked for)."""
    monkeypatch.setattr(backends, "LOCAL_BACKENDS", frozenset({"snapshotting"}))

    def make(answer: object, state: str) -> tuple[SnapshottingBackend, DiskSnapshot]:
        backend, snapshot = snapshot_with(answer)
        DiskSnapshot.objects.filter(pk=snapshot.pk).update(state=state)
        snapshot.refresh_from_db()
        with django_capture_on_commit_callbacks() as callbacks:
            storage.disk_snapshot_delete(snapshot=snapshot, actor=operator)
        assert len(callbacks) == 1
        assert DiskSnapshot.objects.get(pk=snapshot.pk).state == SnapshotState.DELETING
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
    machines.disk_snapshot_delete(snapshot.pk)
    assert backend.calls == 1
    assert not DiskSnapshot.objects.exists()


@pytest.mark.django_db
def test_a_snapshot_that_cannot_be_deleted_reads_failed_with_the_reason(deleting):
    backend, snapshot = deleting(None, SnapshotState.READY)
    backend.answer = BackendError(NO_SPACE)
    with pytest.raises(BackendError):
        machines.disk_snapshot_delete(snapshot.pk)
    machines.device_task_failed("instances.disk_snapshot_delete", snapshot.pk, NO_SPACE)
    snapshot.refresh_from_db()
    assert (snapshot.state, snapshot.message) == (
        SnapshotState.FAILED,
        f"Deleting it failed: {NO_SPACE}",
    )
    event = AuditEvent.objects.get(action="disk.snapshot_delete", outcome=Outcome.FAILURE)
    assert event.message == f"Deleting snapshot before-upgrade of web-1-root failed: {NO_SPACE}"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("state", "message"),
    [
        (SnapshotState.TAKING, "Snapshot before-upgrade is being taken; delete it after."),
        (SnapshotState.DELETING, "Snapshot before-upgrade is being deleted already."),
    ],
)
def test_a_snapshot_being_taken_or_deleted_cannot_be_deleted(
    snapshot_with, operator, monkeypatch, state, message
):
    monkeypatch.setattr(backends, "LOCAL_BACKENDS", frozenset({"snapshotting"}))
    _, snapshot = snapshot_with(None)
    DiskSnapshot.objects.filter(pk=snapshot.pk).update(state=state)
    with pytest.raises(ActionRefused, match=message):
        storage.disk_snapshot_delete(snapshot=snapshot, actor=operator)
    assert DiskSnapshot.objects.get(pk=snapshot.pk).state == state
    assert not AuditEvent.objects.filter(action="disk.snapshot_delete").exists()


@pytest.fixture
def reverting(snapshot_with, operator, monkeypatch):
    """reverting(answer, power_state, state) -> (backend, snapshot, a call asking to revert)."""
    monkeypatch.setattr(backends, "LOCAL_BACKENDS", frozenset({"snapshotting"}))

    def make(answer: object, power_state: str = PowerState.STOPPED, state: str = "ready"):  # type: ignore[no-untyped-def]
        backend, snapshot = snapshot_with(answer)
        Instance.objects.filter(pk=snapshot.disk.instance_id).update(power_state=power_state)
        DiskSnapshot.objects.filter(pk=snapshot.pk).update(state=state)
        snapshot = DiskSnapshot.objects.select_related("disk__instance").get(pk=snapshot.pk)

        def ask(confirm: bool = True) -> None:
            storage.disk_snapshot_revert(snapshot=snapshot, actor=operator, confirm=confirm)

        return backend, snapshot, ask

    return make


@pytest.mark.django_db
def test_a_stopped_instances_disk_is_reverted_to_a_snapshot_once_confirmed(
    reverting, django_capture_on_commit_callbacks
):
    backend, snapshot, ask = reverting(None)
    with pytest.raises(ActionRefused) as refused:
        ask(confirm=False)
    assert str(refused.value) == (
        "Reverting web-1-root to before-upgrade discards everything written to it since the "
        "snapshot. Confirm to continue."
    )
    with django_capture_on_commit_callbacks() as callbacks:
        ask()
    assert len(callbacks) == 1
    event = AuditEvent.objects.get(action="disk.snapshot_revert")
    assert event.detail == {"snapshot": "before-upgrade"}
    machines.disk_snapshot_revert(snapshot.pk)
    assert backend.calls == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("power_state", "state", "message"),
    [
        (PowerState.RUNNING, "ready", "Stop the instance before reverting a disk to a snapshot."),
        (
            PowerState.STOPPED,
            "failed",
            "Snapshot before-upgrade failed; retry it first.",
        ),
        (
            PowerState.STOPPED,
            "taking",
            "Snapshot before-upgrade is being taken; revert to it once it is.",
        ),
    ],
)
def test_a_disk_is_reverted_only_when_stopped_and_to_a_taken_snapshot(
    reverting, power_state, state, message
):
    _, _, ask = reverting(None, power_state, state)
    with pytest.raises(ActionRefused) as refused:
        ask()
    assert str(refused.value) == message
    assert not AuditEvent.objects.filter(action="disk.snapshot_revert").exists()


@pytest.mark.django_db(transaction=True)
def test_a_revert_that_fails_on_the_host_says_why_on_the_instance(reverting):
    _, snapshot, _ = reverting(
        BackendError("Stop the instance before reverting a disk to a snapshot.")
    )
    assert tasks.disk_snapshot_revert.apply(args=[snapshot.pk]).failed()
    event = AuditEvent.objects.get(action="disk.snapshot_revert", outcome=Outcome.FAILURE)
    assert event.target_id == str(snapshot.disk.instance_id)
    assert event.message == (
        "Reverting web-1-root to before-upgrade failed: Stop the instance before reverting a "
        "disk to a snapshot."
    )


@pytest.mark.django_db(transaction=True)
def test_a_hotplug_that_fails_says_so_on_the_instance(snapshot_with):
    backend, snapshot = snapshot_with(BackendError("No free PCIe root port for another disk."))
    assert tasks.disk_hotplug.apply(args=[snapshot.disk_id]).failed()
    assert backend.calls == 1
    event = AuditEvent.objects.get(action="instance.disk_hotplug")
    assert (event.outcome, event.target_id) == (Outcome.FAILURE, str(snapshot.disk.instance_id))
    assert (
        event.message == "Plugging in web-1-root failed: No free PCIe root port for another disk."
    )


class LinkBackend:
    """Sets links; `meanwhile` runs during the first, as the user's next click would."""

    name = "links"

    def __init__(self, meanwhile) -> None:  # type: ignore[no-untyped-def]
        self.meanwhile = meanwhile
        self.applied: list[bool] = []

    def set_link(self, machine_id: str, nic_name: str, up: bool) -> bool:
        if not self.applied:
            self.meanwhile()
        self.applied.append(up)
        return True


@pytest.mark.django_db
def test_a_link_toggled_again_during_its_task_ends_as_the_last_click_asked(on_backend):
    def toggled_back_up() -> None:
        NetworkInterface.objects.filter(pk=nic.pk).update(link_desired=LinkState.UP)

    backend = LinkBackend(toggled_back_up)
    instance = on_backend(backend, power_state=PowerState.RUNNING)
    nic = instance.nics.get()
    NetworkInterface.objects.filter(pk=nic.pk).update(link_desired=LinkState.DOWN)
    machines.machine_set_link(nic.pk)
    assert backend.applied == [False, True]
    assert NetworkInterface.objects.get(pk=nic.pk).carrier == CarrierState.UP
