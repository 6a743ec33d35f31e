"""Requests on one instance asked at the same moment, on PostgreSQL: Start with Revert, Start
with Delete. Each takes the instance's row lock, so the second waits for the first to commit and
is then refused. Each test holds the first request inside its transaction until the second is
seen waiting."""

import threading
from collections.abc import Callable

import pytest
from django.db import connection

from instances.choices import PowerState, SnapshotState
from instances.errors import ActionRefused
from instances.models import DiskSnapshot, Instance
from instances.services import instances, power, snapshots
from tests.factories import instance_request

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks: PostgreSQL only"),
]


@pytest.fixture
def stopped(project, operator, subnet, host_queue_of):
    instance = instances.instance_create(
        project=project, actor=operator, request=instance_request(subnet)
    )
    host_queue_of(instance)  # what the requests queue stays on a queue no worker reads
    snapshot = DiskSnapshot.objects.create(
        disk=instance.disks.get(), name="nightly", state=SnapshotState.READY
    )
    return instance, snapshot


class Held:
    """Runs a request in a thread and holds it at its audit record, inside its transaction."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: object) -> None:
        self.inside, self.go = threading.Event(), threading.Event()
        record = module.audit_record  # type: ignore[attr-defined]

        def held_record(**kwargs: object) -> object:
            self.inside.set()
            assert self.go.wait(10)
            return record(**kwargs)

        monkeypatch.setattr(module, "audit_record", held_record)


def in_thread(call: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as error:  # handed to the test
            errors.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def second_of_two(
    monkeypatch: pytest.MonkeyPatch,
    first_module: object,
    first: Callable[[], None],
    second: Callable[[], None],
) -> list[BaseException]:
    """Runs first, holds it inside its transaction, asks second, sees it wait, lets first
    commit; what second raised."""
    held = Held(monkeypatch, first_module)
    first_thread, first_errors = in_thread(first)
    assert held.inside.wait(10)
    second_thread, second_errors = in_thread(second)
    second_thread.join(0.5)
    assert second_thread.is_alive()  # waiting for the first one's lock
    held.go.set()
    first_thread.join(10)
    second_thread.join(10)
    assert not first_errors
    return second_errors


def test_a_start_asked_during_a_revert_waits_and_is_refused(monkeypatch, stopped, operator):
    instance, snapshot = stopped
    errors = second_of_two(
        monkeypatch, snapshots,
        lambda: snapshots.disk_snapshot_revert(snapshot=snapshot, actor=operator, confirm=True),
        lambda: power.instance_start(instance=Instance.objects.get(pk=instance.pk), actor=operator),
    )  # fmt: skip
    assert [str(e) for e in errors] == [
        "web-1-root is being reverted to a snapshot; start the instance after."
    ]
    assert Instance.objects.get(pk=instance.pk).power_state == PowerState.STOPPED
    assert DiskSnapshot.objects.get(pk=snapshot.pk).state == SnapshotState.REVERTING


def test_a_revert_asked_during_a_start_waits_and_is_refused(monkeypatch, stopped, operator):
    instance, snapshot = stopped
    errors = second_of_two(
        monkeypatch, power,
        lambda: power.instance_start(instance=Instance.objects.get(pk=instance.pk), actor=operator),
        lambda: snapshots.disk_snapshot_revert(snapshot=snapshot, actor=operator, confirm=True),
    )  # fmt: skip
    assert [type(e) for e in errors] == [ActionRefused]
    assert str(errors[0]) == "Wait until the instance is no longer starting."
    assert Instance.objects.get(pk=instance.pk).power_state == PowerState.STARTING
    assert DiskSnapshot.objects.get(pk=snapshot.pk).state == SnapshotState.READY


def test_a_start_asked_during_a_delete_waits_and_finds_no_instance(
    monkeypatch, stopped, owner, operator
):
    instance, _ = stopped
    errors = second_of_two(
        monkeypatch, instances,
        lambda: instances.instance_delete(instance=instance, actor=owner),
        lambda: power.instance_start(instance=Instance.objects.get(pk=instance.pk), actor=operator),
    )  # fmt: skip
    assert [str(e) for e in errors] == ["Instance web-1 was deleted."]
    assert not Instance.objects.filter(pk=instance.pk).exists()


def test_a_delete_asked_during_a_start_waits_and_is_refused(monkeypatch, stopped, owner, operator):
    instance, _ = stopped
    errors = second_of_two(
        monkeypatch, power,
        lambda: power.instance_start(instance=Instance.objects.get(pk=instance.pk), actor=operator),
        lambda: instances.instance_delete(instance=instance, actor=owner),
    )  # fmt: skip
    assert [str(e) for e in errors] == ["Stop the instance before deleting it."]
    assert Instance.objects.get(pk=instance.pk).power_state == PowerState.STARTING
