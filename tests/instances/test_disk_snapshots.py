"""The worker's side of a disk snapshot: the record says whether the guest was frozen for it, and
goes, with an event saying why, when the snapshot cannot be taken."""

import pytest

from instances import backends, tasks
from instances.backends.base import BackendError
from instances.choices import Outcome, PowerState
from instances.models import AuditEvent, DiskSnapshot, Instance
from instances.services import machines, storage
from instances.services.instances import instance_create
from tests.factories import instance_request


class SnapshottingBackend:
    name = "snapshotting"

    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.calls = 0

    def snapshot_disk(self, machine_id: str, disk_name: str, snapshot_name: str) -> bool:
        self.calls += 1
        if isinstance(self.answer, BaseException):
            raise self.answer
        return bool(self.answer)


@pytest.fixture
def snapshot_with(monkeypatch, project, operator, subnet, django_capture_on_commit_callbacks):
    """snapshot_with(answer) -> (backend, snapshot of a running instance's root disk)."""

    def make(answer: object) -> tuple[SnapshottingBackend, DiskSnapshot]:
        backend = SnapshottingBackend(answer)
        monkeypatch.setattr(backends, "_factories", {"snapshotting": lambda: backend})
        backends.backend_named.cache_clear()
        instance = instance_create(
            project=project, actor=operator, request=instance_request(subnet)
        )
        Instance.objects.filter(pk=instance.pk).update(
            backend="snapshotting", power_state=PowerState.RUNNING
        )
        disk = instance.disks.get()
        with django_capture_on_commit_callbacks(execute=False):
            snapshot = storage.disk_snapshot(disk=disk, actor=operator, name="before-upgrade")
        return backend, snapshot

    yield make
    backends.backend_named.cache_clear()


@pytest.mark.django_db
@pytest.mark.parametrize("frozen", [True, False])
def test_a_snapshot_is_consistent_when_the_guest_was_frozen_for_it(snapshot_with, frozen):
    _, snapshot = snapshot_with(frozen)
    machines.disk_snapshot(snapshot.pk)
    snapshot.refresh_from_db()
    assert snapshot.consistent is frozen


@pytest.mark.django_db(transaction=True)  # the task's end closes the connection, as in a worker
def test_a_snapshot_that_cannot_be_taken_goes_and_the_instance_says_why(snapshot_with):
    error = BackendError("QEMU refused blockdev-snapshot-internal-sync: no space left on device")
    backend, snapshot = snapshot_with(error)
    assert tasks.disk_snapshot.apply(args=[snapshot.pk]).failed()
    assert backend.calls == 4  # the first try and three retries
    assert not DiskSnapshot.objects.exists()
    event = AuditEvent.objects.get(action="disk.snapshot", outcome=Outcome.FAILURE)
    assert event.message == (
        "Snapshot before-upgrade of web-1-root failed: QEMU refused "
        "blockdev-snapshot-internal-sync: no space left on device"
    )
