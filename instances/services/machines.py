"""What the worker on an instance's host does: drive the backend and settle the power state.

A task starts only while the request's claim holds: the transitional state it set, at the time
it set it (sent with the task). Every settle is a conditional UPDATE from that state, and one that
gives up also from that time, so a task that arrives late (the user force-stopped meanwhile, or
another worker finished it) changes nothing. Backend errors leave a message the user sees on the
instance.
"""

import logging
import time
from dataclasses import asdict, replace
from datetime import datetime

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from instances.backends import backend_named
from instances.backends.base import (
    Backend,
    BackendError,
    Migrates,
    MigrationReport,
    Power,
    Resumes,
)
from instances.choices import (
    AUTO_RESTART_STRATEGIES,
    CarrierState,
    LastExit,
    LinkState,
    Outcome,
    PowerState,
    RunStrategy,
)
from instances.holds import hold_point
from instances.models import Instance, NetworkInterface
from instances.services.audit import audit_record
from instances.services.container_disks import container_disks_ready
from instances.specs import machine_spec

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT = getattr(settings, "ZOPDAY_SHUTDOWN_TIMEOUT", 60)
ACPI_REPEAT_SECONDS = 5
CUT_MARGIN = 30  # past a grace period: the power cut and the machine's tidying up


def settle(
    instance_id: int,
    expected: str,
    state: str,
    message: str = "",
    *,
    since: datetime | None = None,
    at: datetime | None = None,
    **extra: object,
) -> bool:
    """Move the instance from `expected` to `state` (as of `at`, default now), only if it is
    still in `expected` (and, given `since`, has not been claimed again since then: Shutdown and
    Force Shutdown share Stopping, and a shutdown giving up must not undo a Force Shutdown asked
    for meanwhile). A transitional state settled `at` a time is a claim of that time."""
    rows = Instance.objects.filter(pk=instance_id, power_state=expected)
    if since is not None:
        rows = rows.filter(state_changed_at=since)
    updated = rows.update(
        power_state=state,
        power_message=message[:300],
        state_changed_at=at or timezone.now(),
        **extra,
    )
    if updated:
        carrier = _carrier_for(state)
        nics = NetworkInterface.objects.filter(instance_id=instance_id)
        if carrier == CarrierState.UP:
            nics.filter(link_desired=LinkState.DOWN).update(carrier=CarrierState.DOWN)
            nics.filter(link_desired=LinkState.UP).update(carrier=CarrierState.UP)
        elif carrier == CarrierState.STOPPED:
            nics.update(carrier=CarrierState.STOPPED)
    return bool(updated)


def _carrier_for(state: str) -> str | None:
    if state == PowerState.RUNNING:
        return CarrierState.UP
    if state in (PowerState.STOPPED, PowerState.FAILED):
        return CarrierState.STOPPED
    return None


def _claimed(instance_id: int, state: str, claimed_at: str | None = None) -> Instance | None:
    """The instance, while the request's claim holds: in `state` and, given the claim's time
    (services.power sends it; the reconciler's restarts do not), not claimed again since (a
    Force Shutdown claims Stopping over a Shutdown). Settles then pass its state_changed_at."""
    rows = Instance.objects.filter(pk=instance_id, power_state=state)
    if claimed_at is not None:
        rows = rows.filter(state_changed_at=datetime.fromisoformat(claimed_at))
    return rows.first()


def _fail(instance: Instance, expected: str, error: BackendError, action: str) -> None:
    log.warning("%s of %s failed: %s", action, instance.machine_id, error.message)
    backend = backend_named(instance.backend)
    try:
        running = backend.status(instance.machine_id).power == Power.RUNNING
    except BackendError:  # not known: as it was before the request (Force Shutdown then helps)
        running = action != "start"
    settle(
        instance.pk,
        expected,
        PowerState.RUNNING if running else PowerState.FAILED,
        error.message,
        since=instance.state_changed_at,
    )
    audit_record(
        actor=None,
        action=f"instance.{action}",
        project=instance.project,
        target=instance,
        outcome=Outcome.FAILURE,
        message=error.message,
    )


def power_task_failed(
    instance_id: int, action: str, expected: str, claimed_at: str | None = None, message: str = ""
) -> None:
    """A power task died of an error it did not expect (a bug, the database going away), or
    its worker died during it too often: settle the instance now, as a backend error would,
    rather than leave it in its transitional state until the reconciler calls it stuck. The
    user sees what failed (`message`, or that the worker's log says); Celery logs the error."""
    instance = _claimed(instance_id, expected, claimed_at)
    if instance is None:  # settled before the error, or claimed again
        return
    if expected == PowerState.STOPPING:
        _withdraw_stop(instance)
    what = action.replace("_", " ")
    message = (
        message or f"The {what} failed on the host's worker; the worker's log has the details."
    )
    _fail(instance, expected, BackendError(message), action)


def machine_start(instance_id: int, claimed_at: str | None = None) -> None:
    instance = _claimed(instance_id, PowerState.STARTING, claimed_at)
    if instance is None:
        return
    if instance.restarts_in_a_row and instance.run_strategy not in AUTO_RESTART_STRATEGIES:
        # an automatic restart (a user's request resets the count), waiting out its delay
        # while the user changed the strategy
        settle(
            instance_id,
            PowerState.STARTING,
            PowerState.STOPPED,
            "The automatic restart was called off: the run strategy is now "
            f"{instance.run_strategy}.",
            since=instance.state_changed_at,
        )
        return
    backend = backend_named(instance.backend)
    try:
        # pulls run here, on the host's worker; a cluster pulls its own (KubeVirt's containerDisk)
        container_disks_ready(instance, pull=not getattr(backend, "pulls_container_disks", False))
        spec = machine_spec(instance)
        # defines the machine first, under its lock; False when another start launched it
        launching = backend.start(spec)
    except BackendError as error:
        _fail(instance, PowerState.STARTING, error, "start")
        return
    hold_point("start.launched")
    if settle(
        instance_id,
        PowerState.STARTING,
        PowerState.RUNNING,
        last_exit=LastExit.NONE,
        # a new run has all its spare hotplug ports; a machine found running keeps its count
        hotplugged_disks=0 if launching else F("hotplugged_disks"),
    ):
        return
    # claimed again while it launched: a Force Shutdown, which may have found nothing to stop
    # yet and recorded Stopped. Its request wins: end what this start launched. (A reconciler
    # pass that adopts the machine as Running between the launch and this read keeps it so.)
    if Instance.objects.filter(pk=instance_id, power_state=PowerState.RUNNING).exists():
        return
    try:
        backend.force_stop(spec.id)
    except BackendError as error:  # the reconciler then records it running
        log.warning("stopping %s after a stop asked for while it started: %s", spec.id, error)


def machine_shutdown(instance_id: int, claimed_at: str | None = None) -> None:
    """Press the ACPI button, wait for the guest to power off, record Stopped, then tidy up.

    Past SHUTDOWN_TIMEOUT it is Running again (Halted: power is cut); on timeout or error the
    backend forgets the stop, so a later crash still counts as a crash for the run strategy.
    """
    instance = _claimed(instance_id, PowerState.STOPPING, claimed_at)
    if instance is None:
        return
    backend = backend_named(instance.backend)
    if backend.stop_cuts_power:
        _shutdown_with_grace(instance, backend)
        return
    message = ""
    try:
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT
        while True:
            backend.shutdown(instance.machine_id)
            hold_point("shutdown.pressed")
            wait = max(0.0, min(ACPI_REPEAT_SECONDS, deadline - time.monotonic()))
            if backend.wait_powered_off(instance.machine_id, wait):
                break
            if time.monotonic() >= deadline and _halted(instance_id):
                backend.force_stop(instance.machine_id)
                message = (
                    f"The guest did not power off within {SHUTDOWN_TIMEOUT} s of the ACPI "
                    "signal; the Halted run strategy cut its power."
                )
                break
            if time.monotonic() >= deadline:
                _withdraw_stop(instance)  # first: once Running, a new Shutdown may press
                settle(
                    instance_id,
                    PowerState.STOPPING,
                    PowerState.RUNNING,
                    f"The guest did not power off within {SHUTDOWN_TIMEOUT} s of the ACPI "
                    "signal. Use Force Shutdown if it is unresponsive.",
                    since=instance.state_changed_at,
                )
                return
    except BackendError as error:
        _withdraw_stop(instance)
        _fail(instance, PowerState.STOPPING, error, "shutdown")
        return
    settle(
        instance_id, PowerState.STOPPING, PowerState.STOPPED, message, last_exit=LastExit.REQUESTED
    )
    try:
        backend.status(instance.machine_id)
    except BackendError as error:  # the reconciler reads the status again within seconds
        log.warning("tidying up %s after its shutdown failed: %s", instance.machine_id, error)


def _shutdown_with_grace(instance: Instance, backend: Backend) -> None:
    """A stop that cannot be withdrawn (KubeVirt's): the guest gets SHUTDOWN_TIMEOUT seconds,
    then the backend cuts its power, whatever the run strategy."""
    started = time.monotonic()
    try:
        backend.shutdown(instance.machine_id, grace=SHUTDOWN_TIMEOUT)
        hold_point("shutdown.pressed")
        if not backend.wait_powered_off(instance.machine_id, SHUTDOWN_TIMEOUT + CUT_MARGIN):
            raise BackendError(
                f"The guest was still on {CUT_MARGIN} s after its grace period of "
                f"{SHUTDOWN_TIMEOUT} s ended."
            )
    except BackendError as error:
        _fail(instance, PowerState.STOPPING, error, "shutdown")
        return
    message = ""
    if time.monotonic() - started >= SHUTDOWN_TIMEOUT:
        message = (
            f"The guest did not power off within {SHUTDOWN_TIMEOUT} s of the ACPI signal; "
            "its power was cut at the end of the grace period."
        )
    settle(
        instance.pk, PowerState.STOPPING, PowerState.STOPPED, message, last_exit=LastExit.REQUESTED
    )


def _halted(instance_id: int) -> bool:
    """Halted keeps an instance off: a guest that ignores the ACPI signal is powered off."""
    return Instance.objects.filter(pk=instance_id, run_strategy=RunStrategy.HALTED).exists()


def _withdraw_stop(instance: Instance) -> None:
    try:
        backend_named(instance.backend).withdraw_stop(instance.machine_id)
    except BackendError as error:  # then a later crash reads as the stop asked for
        log.warning("withdrawing the stop of %s: %s", instance.machine_id, error.message)


def machine_force_stop(instance_id: int, claimed_at: str | None = None) -> None:
    instance = _claimed(instance_id, PowerState.STOPPING, claimed_at)
    if instance is None:
        return
    try:
        backend_named(instance.backend).force_stop(instance.machine_id)
    except BackendError as error:
        _withdraw_stop(instance)
        _fail(instance, PowerState.STOPPING, error, "force_stop")
        return
    settle(instance_id, PowerState.STOPPING, PowerState.STOPPED, last_exit=LastExit.REQUESTED)


def machine_restart(instance_id: int, claimed_at: str | None = None) -> None:
    instance = _claimed(instance_id, PowerState.RESTARTING, claimed_at)
    if instance is None:
        return
    try:
        backend_named(instance.backend).restart(instance.machine_id, request=claimed_at or "")
    except BackendError as error:
        _fail(instance, PowerState.RESTARTING, error, "restart")
        return
    settle(instance_id, PowerState.RESTARTING, PowerState.RUNNING)


def machine_resume(instance_id: int, claimed_at: str | None = None) -> None:
    """Let a guest paused on a full disk run on; still full, it pauses again at once and the
    reconciler says so."""
    instance = _claimed(instance_id, PowerState.STARTING, claimed_at)
    if instance is None:
        return
    backend = backend_named(instance.backend)
    try:
        if not isinstance(backend, Resumes):
            raise BackendError(f"{instance.backend} instances do not pause.")
        backend.resume(instance.machine_id)
    except BackendError as error:
        _fail(instance, PowerState.STARTING, error, "resume")
        return
    settle(instance_id, PowerState.STARTING, PowerState.RUNNING)


def machine_migrate(instance_id: int, claimed_at: str | None = None) -> None:
    """Move the running machine to another node, each phase kept on the instance for its page;
    one that fails leaves it running where it was, saying why."""
    instance = _claimed(instance_id, PowerState.MIGRATING, claimed_at)
    if instance is None:
        return
    backend = backend_named(instance.backend)
    rows = Instance.objects.filter(pk=instance_id, power_state=PowerState.MIGRATING)
    last = [MigrationReport("Pending")]

    def report(progress: MigrationReport) -> None:
        last.append(progress)
        rows.update(migration=asdict(progress))

    try:
        if not isinstance(backend, Migrates):
            raise BackendError(f"{instance.backend} instances do not migrate.")
        done = backend.migrate(instance.machine_id, report)
    except BackendError as error:
        rows.update(migration=asdict(replace(last[-1], phase="Failed", message=error.message)))
        _fail(instance, PowerState.MIGRATING, error, "migrate")
        return
    if done.target:
        rows.update(node=done.target)
    settle(instance_id, PowerState.MIGRATING, PowerState.RUNNING, migration=asdict(done))
