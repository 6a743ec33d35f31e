"""The host's reconciler, on a stand-in backend: adoption, Halted, stuck transitions, crash
loops, links changed while an instance started, and one machine's error among many."""

from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from instances.backends.base import ExitKind, MachineStatus, Power
from instances.choices import CarrierState, LinkState, PowerState, RunStrategy
from instances.models import AuditEvent, GuestReport, Instance, NetworkInterface
from instances.services import reconciler
from instances.services.instances import instance_create
from tests.factories import instance_request
from tests.instances.standins import LaunchingBackend

pytestmark = pytest.mark.django_db


def stuck(instance: Instance, **fields: object) -> datetime:
    """Put the instance's transition past the reconciler's patience; when it began."""
    long_ago = timezone.now() - timedelta(seconds=reconciler.STUCK_AFTER_SECONDS + 1)
    Instance.objects.filter(pk=instance.pk).update(state_changed_at=long_ago, **fields)
    return long_ago


@pytest.mark.parametrize(
    ("strategy", "state", "force_stops"),
    [(RunStrategy.MANUAL, PowerState.RUNNING, 0), (RunStrategy.HALTED, PowerState.STOPPED, 1)],
)
def test_the_reconciler_adopts_a_running_machine_unless_it_is_halted(
    starting, launching_is_local, strategy, state, force_stops
):
    backend, instance = starting(lambda: None)
    backend.running = True  # found running, after a worker restart
    Instance.objects.filter(pk=instance.pk).update(
        power_state=PowerState.STOPPED, run_strategy=strategy
    )
    reconciler.reconcile_host(instance.host)
    instance.refresh_from_db()
    assert instance.power_state == state and backend.force_stops == force_stops
    events = AuditEvent.objects.filter(action="instance.force_stop", actor=None)
    assert events.count() == force_stops


def test_the_reconciler_stops_no_machine_whose_strategy_changed_during_its_pass(
    starting, launching_is_local, monkeypatch
):
    backend, instance = starting(lambda: None)
    backend.running = True
    Instance.objects.filter(pk=instance.pk).update(
        power_state=PowerState.STOPPED, run_strategy=RunStrategy.HALTED
    )

    def status_after_the_user_chose_manual(machine_id: str) -> MachineStatus:
        Instance.objects.filter(pk=instance.pk).update(run_strategy=RunStrategy.MANUAL)
        return MachineStatus(Power.RUNNING)

    monkeypatch.setattr(backend, "status", status_after_the_user_chose_manual)
    reconciler.reconcile_host(instance.host)
    assert backend.force_stops == 0 and backend.running


def test_one_machines_surprise_leaves_the_others_reconciled(
    starting, launching_is_local, monkeypatch, caplog
):
    backend, instance = starting(lambda: None)
    backend.running = True
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.STOPPED)
    broken = Instance.objects.get(pk=instance.pk)
    broken.pk, broken.name = None, "web-0"  # listed before web-1
    broken.save()

    def status(machine_id: str) -> MachineStatus:
        if machine_id == broken.machine_id:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
        return MachineStatus(Power.RUNNING)

    monkeypatch.setattr(backend, "status", status)
    reconciler.reconcile_host(instance.host)
    assert Instance.objects.get(pk=instance.pk).power_state == PowerState.RUNNING
    assert f"reconciling {broken.machine_id}" in caplog.text


def test_a_start_whose_worker_died_is_settled_from_the_host_with_a_message(
    starting, launching_is_local
):
    backend, instance = starting(lambda: None)
    backend.running = True  # QEMU came up; the worker died before it recorded Running
    stuck(instance)
    reconciler.reconcile_host(instance.host)
    instance.refresh_from_db()
    assert (instance.power_state, instance.power_message) == (
        PowerState.RUNNING,
        "Starting did not finish within 5 minutes (its worker may have stopped); the instance "
        "is running on its host.",
    )


class CrashedBackend(LaunchingBackend):
    def status(self, machine_id: str) -> MachineStatus:
        return MachineStatus(Power.STOPPED, exit=ExitKind.CRASHED)


@pytest.mark.parametrize(("in_a_row", "delay"), [(0, 0), (1, 10), (2, 20), (6, 120)])
def test_a_guest_that_keeps_crashing_is_restarted_later_each_time(
    on_backend,
    launching_is_local,
    host_queue_of,
    django_capture_on_commit_callbacks,
    in_a_row,
    delay,
):
    instance = on_backend(
        CrashedBackend(lambda: None),
        power_state=PowerState.RUNNING,
        run_strategy=RunStrategy.ALWAYS,
        restarts_in_a_row=in_a_row,
    )
    queue = host_queue_of(instance)
    with django_capture_on_commit_callbacks(execute=True):
        reconciler.reconcile_host(instance.host)
    instance.refresh_from_db()
    assert (instance.power_state, instance.restarts_in_a_row) == (
        PowerState.STARTING,
        in_a_row + 1,
    )
    [sent] = queue.sent()
    claim = instance.state_changed_at.isoformat()  # a claim of its own, like a user's Start
    assert (sent.task, sent.args) == ("instances.machine_start", (instance.pk, claim))
    if delay:
        assert instance.power_message == (
            f"Crashed; run strategy Always. Restarting in {delay} s: restart {in_a_row + 1} in "
            "a row."
        )
        assert sent.eta is not None
        assert delay - 2 < (sent.eta - timezone.now()).total_seconds() <= delay
    else:
        assert instance.power_message == "" and sent.eta is None


def test_a_guest_that_ran_a_while_before_it_crashed_is_restarted_at_once(
    on_backend, launching_is_local, host_queue_of, django_capture_on_commit_callbacks
):
    instance = on_backend(
        CrashedBackend(lambda: None),
        power_state=PowerState.RUNNING,
        run_strategy=RunStrategy.ALWAYS,
        restarts_in_a_row=5,
        state_changed_at=timezone.now() - timedelta(seconds=reconciler.STEADY_RUN_SECONDS + 1),
    )
    queue = host_queue_of(instance)
    with django_capture_on_commit_callbacks(execute=True):
        reconciler.reconcile_host(instance.host)
    assert Instance.objects.get(pk=instance.pk).restarts_in_a_row == 1
    assert [sent.eta for sent in queue.sent()] == [None]


def test_a_link_changed_while_the_instance_started_is_applied_by_the_reconciler_once(
    starting, launching_is_local, host_queue_of, monkeypatch, django_capture_on_commit_callbacks
):
    backend, instance = starting(lambda: None)
    eth0 = instance.nics.get()
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.RUNNING)
    NetworkInterface.objects.filter(pk=eth0.pk).update(link_desired=LinkState.DOWN)
    links = {"eth0": True}
    monkeypatch.setattr(
        backend, "status", lambda machine_id: MachineStatus(Power.RUNNING, links=dict(links))
    )
    queue = host_queue_of(instance)
    with django_capture_on_commit_callbacks(execute=True):
        reconciler.reconcile_host(instance.host)
    assert backend.links == [("eth0", False)] and queue.sent() == []
    assert NetworkInterface.objects.get(pk=eth0.pk).carrier == CarrierState.DOWN

    links["eth0"] = False  # applied: the next pass finds nothing to do
    reconciler.reconcile_host(instance.host)
    assert backend.links == [("eth0", False)]


def test_the_carrier_is_what_the_host_set_and_the_guest_last_reported(
    starting, launching_is_local, monkeypatch
):
    backend, instance = starting(lambda: None)
    eth0 = instance.nics.get()
    started = timezone.now() - timedelta(minutes=1)
    Instance.objects.filter(pk=instance.pk).update(
        power_state=PowerState.RUNNING, state_changed_at=started
    )
    NetworkInterface.objects.filter(pk=eth0.pk).update(carrier=CarrierState.UP)
    monkeypatch.setattr(
        backend, "status", lambda machine_id: MachineStatus(Power.RUNNING, links={"eth0": True})
    )
    seen = {"name": "eth0", "mac": eth0.mac, "addresses": [], "carrier": False}
    now = timezone.now()
    GuestReport.objects.create(instance=instance, reported_at=now, asked_at=now, interfaces=[seen])
    reconciler.reconcile_host(instance.host)
    assert NetworkInterface.objects.get(pk=eth0.pk).carrier == CarrierState.DOWN

    GuestReport.objects.filter(instance=instance).update(interfaces=[{**seen, "carrier": True}])
    reconciler.reconcile_host(instance.host)
    assert NetworkInterface.objects.get(pk=eth0.pk).carrier == CarrierState.UP


def test_an_automatic_restart_lost_with_its_worker_is_asked_for_again(
    starting, launching_is_local, host_queue_of, django_capture_on_commit_callbacks
):
    _, instance = starting(lambda: None)  # not running: the restart never began
    long_ago = stuck(instance, run_strategy=RunStrategy.ALWAYS, restarts_in_a_row=2)
    queue = host_queue_of(instance)
    with django_capture_on_commit_callbacks(execute=True):
        reconciler.reconcile_host(instance.host)
    instance.refresh_from_db()
    assert (instance.power_state, instance.power_message) == (
        PowerState.STARTING,
        "The automatic restart did not begin in time (its worker may have stopped); it was "
        "asked for again.",
    )
    assert instance.state_changed_at > long_ago and instance.restarts_in_a_row == 3
    assert [(sent.task, sent.args) for sent in queue.sent()] == [
        ("instances.machine_start", (instance.pk, instance.state_changed_at.isoformat()))
    ]


def test_a_restart_lost_again_and_again_is_settled_at_last(starting, launching_is_local):
    _, instance = starting(lambda: None)
    stuck(instance, run_strategy=RunStrategy.ALWAYS, restarts_in_a_row=reconciler.LOST_RESTARTS_MAX)
    reconciler.reconcile_host(instance.host)
    assert Instance.objects.get(pk=instance.pk).power_state == PowerState.STOPPED


class HostOfMany(LaunchingBackend):
    """Every machine runs with eth0 up, unless `statuses` says otherwise."""

    def __init__(self) -> None:
        super().__init__(lambda: None)
        self.statuses: dict[str, MachineStatus] = {}

    def status(self, machine_id: str) -> MachineStatus:
        return self.statuses.get(machine_id, MachineStatus(Power.RUNNING, links={"eth0": True}))


def more_like(instance: Instance, operator, count: int) -> list[Instance]:  # type: ignore[no-untyped-def]
    """`count` more running instances on the instance's host and backend, each with its eth0."""
    made = []
    for n in range(count):
        other = instance_create(
            project=instance.project,
            actor=operator,
            request=instance_request(instance.nics.get().subnet, name=f"web-{n + 2}"),
        )
        Instance.objects.filter(pk=other.pk).update(
            backend=instance.backend, host=instance.host, power_state=PowerState.RUNNING
        )
        made.append(other)
    NetworkInterface.objects.update(carrier=CarrierState.UP)
    return made


def queries_of_a_pass(host: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        reconciler.reconcile_host(host)
    return [query["sql"] for query in captured]


def test_a_pass_where_nothing_changed_reads_the_same_for_one_instance_or_many(
    on_backend, launching_is_local, operator
):
    backend = HostOfMany()
    instance = on_backend(backend, power_state=PowerState.RUNNING)
    NetworkInterface.objects.update(carrier=CarrierState.UP)
    alone = queries_of_a_pass(instance.host)
    more_like(instance, operator, 4)
    assert len(queries_of_a_pass(instance.host)) == len(alone)
    assert not any(sql.startswith("UPDATE") for sql in alone)


def test_a_machine_that_changed_among_many_unchanged_is_still_picked_up(
    on_backend, launching_is_local, operator
):
    backend = HostOfMany()
    instance = on_backend(backend, power_state=PowerState.RUNNING)
    others = more_like(instance, operator, 4)
    changed = others[2]
    backend.statuses[changed.machine_id] = MachineStatus(Power.STOPPED, ExitKind.GUEST_POWEROFF)
    seen = {"name": "eth0", "mac": others[0].nics.get().mac, "addresses": [], "carrier": False}
    now = timezone.now()
    GuestReport.objects.create(instance=others[0], reported_at=now, asked_at=now, interfaces=[seen])
    reconciler.reconcile_host(instance.host)
    states = dict(Instance.objects.values_list("pk", "power_state"))
    assert states == {
        **{other.pk: PowerState.RUNNING for other in [instance, *others]},
        changed.pk: PowerState.STOPPED,
    }
    carriers = dict(NetworkInterface.objects.values_list("instance_id", "carrier"))
    assert carriers == {
        **{other.pk: CarrierState.UP for other in [instance, *others]},
        changed.pk: CarrierState.STOPPED,
        others[0].pk: CarrierState.DOWN,  # its guest says so
    }
    assert AuditEvent.objects.filter(action="instance.stopped", target_id=str(changed.pk)).exists()
