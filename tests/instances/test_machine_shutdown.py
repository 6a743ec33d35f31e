"""machine_shutdown, the worker's side of an ACPI shutdown, against a scripted backend: it presses
again while a guest does not react, gives up with a message, and settles what the backend says."""

import pytest
from django.utils import timezone

from instances import tasks
from instances.backends.base import BackendError, MachineStatus, Power
from instances.choices import LastExit, Outcome, PowerState, RunStrategy
from instances.models import AuditEvent, Instance
from instances.services import machines

pytestmark = pytest.mark.django_db


class ScriptedBackend:
    """Answers wait_powered_off from a script: True (off), False (not yet), an error, or a
    function whose answer counts (it acts meanwhile)."""

    stop_cuts_power = False

    name = "scripted"

    def __init__(self, waits: list[object]) -> None:
        self.waits = waits
        self.presses = 0
        self.status_reads = 0
        self.withdrawals = 0
        self.force_stops = 0

    def shutdown(self, machine_id: str, grace: float | None = None) -> None:
        self.presses += 1

    def wait_powered_off(self, machine_id: str, timeout: float) -> bool:
        assert timeout >= 0
        answer = self.waits.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return bool(answer() if callable(answer) else answer)

    def withdraw_stop(self, machine_id: str) -> None:
        self.withdrawals += 1

    def force_stop(self, machine_id: str) -> None:
        self.force_stops += 1

    def status(self, machine_id: str) -> MachineStatus:
        self.status_reads += 1
        return MachineStatus(Power.RUNNING if self.waits else Power.STOPPED)


@pytest.fixture
def scripted(on_backend):
    """scripted([answers]) -> (backend, instance in Stopping on it)."""

    def make(waits: list[object]) -> tuple[ScriptedBackend, Instance]:
        backend = ScriptedBackend(waits)
        return backend, on_backend(backend, power_state=PowerState.STOPPING)

    return make


def test_a_guest_that_powers_off_is_recorded_stopped_then_tidied_up(scripted):
    backend, instance = scripted([True])
    machines.machine_shutdown(instance.pk)
    instance.refresh_from_db()
    assert (instance.power_state, instance.last_exit) == (PowerState.STOPPED, LastExit.REQUESTED)
    assert backend.presses == 1
    assert backend.status_reads == 1  # the status read after Stopped ends the machine's process
    assert backend.withdrawals == 0


def test_a_guest_that_does_not_react_is_pressed_again(scripted, monkeypatch):
    monkeypatch.setattr(machines, "ACPI_REPEAT_SECONDS", 0)
    backend, instance = scripted([False, False, True])
    machines.machine_shutdown(instance.pk)
    instance.refresh_from_db()
    assert instance.power_state == PowerState.STOPPED
    assert backend.presses == 3


def test_a_guest_that_never_powers_off_goes_back_to_running_with_a_message(scripted, monkeypatch):
    monkeypatch.setattr(machines, "SHUTDOWN_TIMEOUT", 0)
    backend, instance = scripted([False])
    machines.machine_shutdown(instance.pk)
    instance.refresh_from_db()
    assert instance.power_state == PowerState.RUNNING
    assert "did not power off within 0 s" in instance.power_message
    assert "Force Shutdown" in instance.power_message
    assert backend.withdrawals == 1  # a later crash is a crash again, for the run strategy


def test_under_halted_a_guest_that_never_powers_off_has_its_power_cut(scripted, monkeypatch):
    monkeypatch.setattr(machines, "SHUTDOWN_TIMEOUT", 0)
    backend, instance = scripted([False])
    Instance.objects.filter(pk=instance.pk).update(run_strategy=RunStrategy.HALTED)
    machines.machine_shutdown(instance.pk)
    instance.refresh_from_db()
    assert (instance.power_state, instance.last_exit) == (PowerState.STOPPED, LastExit.REQUESTED)
    assert "the Halted run strategy cut its power" in instance.power_message
    assert backend.force_stops == 1 and backend.withdrawals == 0


def test_a_shutdown_giving_up_leaves_a_force_shutdown_asked_for_meanwhile_alone(
    scripted, monkeypatch
):
    monkeypatch.setattr(machines, "SHUTDOWN_TIMEOUT", 0)

    def force_shutdown_clicked() -> bool:  # as power._request claims it: Stopping again, now
        Instance.objects.filter(pk=instance.pk).update(state_changed_at=timezone.now())
        return False

    _, instance = scripted([force_shutdown_clicked])
    machines.machine_shutdown(instance.pk)
    instance.refresh_from_db()
    assert (instance.power_state, instance.power_message) == (PowerState.STOPPING, "")


def test_a_shutdown_whose_claim_a_force_shutdown_took_over_leaves_the_instance_to_it(scripted):
    backend, instance = scripted([True])
    instance.refresh_from_db()
    shutdown_claim = instance.state_changed_at.isoformat()
    Instance.objects.filter(pk=instance.pk).update(state_changed_at=timezone.now())  # Force's
    machines.machine_shutdown(instance.pk, shutdown_claim)  # its task comes late: not its claim
    assert backend.presses == 0
    force_claim = Instance.objects.get(pk=instance.pk).state_changed_at.isoformat()
    machines.machine_shutdown(instance.pk, force_claim)  # a task of the current claim acts
    assert backend.presses == 1


def test_a_backend_error_is_shown_on_the_instance(scripted):
    backend, instance = scripted([BackendError("QEMU's monitor stayed busy for 10 s."), True])
    machines.machine_shutdown(instance.pk)
    instance.refresh_from_db()
    assert instance.power_state == PowerState.RUNNING  # what the backend reports
    assert instance.power_message == "QEMU's monitor stayed busy for 10 s."
    assert backend.withdrawals == 1


def test_a_shutdown_error_with_the_status_unreadable_leaves_the_instance_running(
    scripted, monkeypatch
):
    backend, instance = scripted([BackendError("QEMU's monitor stayed busy for 10 s.")])

    def unreadable(machine_id: str) -> MachineStatus:
        raise BackendError("QEMU's monitor stayed busy for 10 s.")

    monkeypatch.setattr(backend, "status", unreadable)
    machines.machine_shutdown(instance.pk)
    instance.refresh_from_db()  # so that Force Shutdown, which ends a hung QEMU, is offered
    assert instance.power_state == PowerState.RUNNING


@pytest.mark.django_db(transaction=True)  # the task's end closes the connection, as in a worker
def test_an_error_the_task_did_not_expect_settles_the_instance_at_once(scripted):
    backend, instance = scripted([RuntimeError("a bug"), True])  # the backend then reads running
    instance.refresh_from_db()
    claim = instance.state_changed_at.isoformat()
    assert tasks.POWER_TASKS["shutdown"].apply(args=[instance.pk, claim]).failed()
    assert backend.withdrawals == 1
    instance.refresh_from_db()
    assert instance.power_state == PowerState.RUNNING  # not Stopping until the reconciler's turn
    assert instance.power_message == (
        "The shutdown failed on the host's worker; the worker's log has the details."
    )
    event = AuditEvent.objects.get(action="instance.shutdown", outcome=Outcome.FAILURE)
    assert event.message == instance.power_message


def test_a_shutdown_that_arrives_after_the_state_moved_on_does_nothing(scripted):
    backend, instance = scripted([True])
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.STOPPED)
    machines.machine_shutdown(instance.pk)
    assert backend.presses == 0
