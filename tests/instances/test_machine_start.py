"""machine_start, the worker's side of Start, when a Force Shutdown is asked for meanwhile."""

import pytest

from instances.backends.base import MachineStatus, Power
from instances.choices import PowerState, RunStrategy
from instances.models import AuditEvent, Instance
from instances.services import machines

pytestmark = pytest.mark.django_db


class LaunchingBackend:
    """Launches; `meanwhile` runs during the launch, as another worker thread would."""

    name = "launching"

    def __init__(self, meanwhile) -> None:  # type: ignore[no-untyped-def]
        self.meanwhile = meanwhile
        self.running = False
        self.force_stops = 0

    def define(self, spec) -> None:  # type: ignore[no-untyped-def]
        pass

    def status(self, machine_id: str) -> MachineStatus:
        return MachineStatus(Power.RUNNING if self.running else Power.STOPPED)

    def start(self, spec) -> None:  # type: ignore[no-untyped-def]
        self.meanwhile()
        self.running = True

    def force_stop(self, machine_id: str) -> None:
        self.force_stops += 1
        self.running = False


@pytest.fixture
def starting(on_backend):
    def make(meanwhile) -> tuple[LaunchingBackend, Instance]:  # type: ignore[no-untyped-def]
        backend = LaunchingBackend(meanwhile)
        return backend, on_backend(backend, power_state=PowerState.STARTING)

    return make


def test_a_start_records_running(starting):
    backend, instance = starting(lambda: None)
    machines.machine_start(instance.pk)
    instance.refresh_from_db()
    assert instance.power_state == PowerState.RUNNING and backend.running


def test_a_force_shutdown_that_finished_during_the_launch_still_wins(starting):
    def force_shutdown_done() -> None:  # claimed and found nothing running yet
        Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.STOPPED)

    backend, instance = starting(force_shutdown_done)
    machines.machine_start(instance.pk)
    instance.refresh_from_db()
    assert instance.power_state == PowerState.STOPPED
    assert backend.force_stops == 1 and not backend.running


@pytest.mark.parametrize(
    ("strategy", "state", "force_stops"),
    [(RunStrategy.MANUAL, PowerState.RUNNING, 0), (RunStrategy.HALTED, PowerState.STOPPED, 1)],
)
def test_the_reconciler_adopts_a_running_machine_unless_it_is_halted(
    starting, monkeypatch, strategy, state, force_stops
):
    monkeypatch.setattr(machines, "LOCAL_BACKENDS", ("launching",))
    backend, instance = starting(lambda: None)
    backend.running = True  # found running, after a worker restart
    Instance.objects.filter(pk=instance.pk).update(
        power_state=PowerState.STOPPED, run_strategy=strategy
    )
    machines.reconcile_host(instance.host)
    instance.refresh_from_db()
    assert instance.power_state == state and backend.force_stops == force_stops
    events = AuditEvent.objects.filter(action="instance.force_stop", actor=None)
    assert events.count() == force_stops
