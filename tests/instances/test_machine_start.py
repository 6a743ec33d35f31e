"""machine_start, the worker's side of Start: a Force Shutdown asked for meanwhile, and an
automatic restart whose run strategy changed during its delay."""

import pytest

from instances.choices import PowerState, RunStrategy
from instances.models import Instance
from instances.services import machines
from tests.instances.standins import claim_of

pytestmark = pytest.mark.django_db


def test_a_start_records_running_with_every_hotplug_port_free(starting):
    backend, instance = starting(lambda: None)
    Instance.objects.filter(pk=instance.pk).update(hotplugged_disks=3)  # from the last run
    machines.machine_start(instance.pk, claim_of(instance))
    instance.refresh_from_db()
    assert instance.power_state == PowerState.RUNNING and backend.running
    assert instance.hotplugged_disks == 0


def test_a_start_that_finds_its_machine_launched_by_another_keeps_the_hotplug_count(starting):
    def other_start_launched() -> None:  # e.g. a second worker's task for the same Start
        backend.running = True

    backend, instance = starting(other_start_launched)
    Instance.objects.filter(pk=instance.pk).update(hotplugged_disks=2)  # plugged since it launched
    machines.machine_start(instance.pk, claim_of(instance))
    instance.refresh_from_db()
    assert instance.power_state == PowerState.RUNNING and instance.hotplugged_disks == 2


def test_a_force_shutdown_that_finished_during_the_launch_still_wins(starting):
    def force_shutdown_done() -> None:  # claimed and found nothing running yet
        Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.STOPPED)

    backend, instance = starting(force_shutdown_done)
    machines.machine_start(instance.pk, claim_of(instance))
    instance.refresh_from_db()
    assert instance.power_state == PowerState.STOPPED
    assert backend.force_stops == 1 and not backend.running


def test_an_automatic_restart_is_called_off_when_the_strategy_changed_during_its_delay(
    starting,
):
    backend, instance = starting(lambda: None)
    # Starting from the reconciler's third restart in a row; then the user chose Manual
    Instance.objects.filter(pk=instance.pk).update(
        restarts_in_a_row=3, run_strategy=RunStrategy.MANUAL
    )
    machines.machine_start(instance.pk, claim_of(instance))
    instance.refresh_from_db()
    assert (instance.power_state, instance.power_message) == (
        PowerState.STOPPED,
        "The automatic restart was called off: the run strategy is now Manual.",
    )
    assert not backend.running


def test_a_restart_that_comes_late_leaves_a_users_start_alone(starting):
    backend, instance = starting(lambda: None)  # the user's Start, under Manual
    late = "2026-01-01T00:00:00+00:00"  # the claim of an automatic restart before it
    machines.machine_start(instance.pk, late)
    instance.refresh_from_db()
    assert instance.power_state == PowerState.STARTING and not backend.running
    machines.machine_start(instance.pk, claim_of(instance))  # the user's own task
    instance.refresh_from_db()
    assert instance.power_state == PowerState.RUNNING and backend.running
