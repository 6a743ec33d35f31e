"""The host's reconciler: every few seconds, make the database match what the hypervisor
reports for each instance on this host, and apply run strategies to guests that stopped by
themselves (services.machines settles the states; tasks.reconcile fans the passes out)."""

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from instances.backends import LOCAL_BACKENDS, backend_named
from instances.backends.base import BackendError, ExitKind, MachineStatus, Power
from instances.choices import (
    AUTO_RESTART_STRATEGIES,
    POWER_TRANSITIONAL,
    LastExit,
    LinkState,
    Outcome,
    PowerState,
    RunStrategy,
)
from instances.models import GuestReport, Instance, NetworkInterface
from instances.models.network import carrier_from, nic_name
from instances.services.audit import audit_record
from instances.services.device_work import machine_set_link
from instances.services.machines import SHUTDOWN_TIMEOUT, settle
from instances.services.queueing import enqueue_host_task
from instances.services.snapshot_work import snapshots_settle_stuck

log = logging.getLogger(__name__)

# a transitional state this old has lost its task (a worker died): never a shutdown still waiting
STUCK_AFTER_SECONDS = max(300, SHUTDOWN_TIMEOUT + 60)
STEADY_RUN_SECONDS = 600  # a guest that ran this long before it stopped is not crash-looping
RESTART_DELAY_MAX = 120  # well inside STUCK_AFTER_SECONDS: a waiting restart is not stuck
LOST_RESTARTS_MAX = 10  # restarts in a row past which a lost one is settled, not asked again


DISK_FULL_ADVICE = (
    "QEMU paused the guest at a write that found the host's disk full. Free space on the host "
    "(delete images, disks or snapshots you no longer need), then Resume."
)


def restart_wanted(strategy: str, exit_kind: ExitKind) -> bool:
    """The run strategies, applied to a guest that stopped without being asked to: Always
    restarts it, RerunOnFailure after a crash only."""
    if exit_kind == ExitKind.REQUESTED or strategy not in AUTO_RESTART_STRATEGIES:
        return False
    return strategy == RunStrategy.ALWAYS or exit_kind == ExitKind.CRASHED


def reconcile_host(host: str) -> None:
    """Make the database match what the backend reports for this host's instances: record guests
    that stopped or started by themselves (applying run strategies), settle states a dead worker
    left, refresh NIC link states, and fail snapshot work that ran out of time.

    A pass reads the rows as plain values and loads an instance only where its row and its
    machine disagree, and the NICs of all running machines in one query: a pass where nothing
    changed makes the same few queries for ten instances or ten thousand.
    """
    stuck_before = timezone.now() - timedelta(seconds=STUCK_AFTER_SECONDS)
    local = Instance.objects.filter(host=host, backend__in=LOCAL_BACKENDS).order_by()
    stuck = set(
        local.filter(
            power_state__in=POWER_TRANSITIONAL, state_changed_at__lt=stuck_before
        ).values_list("pk", flat=True)
    )  # in SQL: a datetime read per row would cost more than the rest of the row
    links: dict[int, dict[str, bool]] = {}  # running instance -> its machine's links
    rows = local.values_list("pk", "backend", "power_state")
    for pk, backend, state in rows.iterator(chunk_size=2000):
        machine_id = Instance.machine_id_of(pk)
        try:
            status = backend_named(backend).status(machine_id)
            running = status.power == Power.RUNNING
            paused = running and bool(status.paused)
            if state == PowerState.RUNNING and running and not paused:
                if status.links:
                    links[pk] = status.links
            elif _out_of_step(state, running, paused, pk in stuck):
                _reconcile(pk, status, stuck_before)
        except BackendError as error:
            log.warning("reconciling %s: %s", machine_id, error.message)
        except Exception:  # one machine's surprise must not keep the host's others unwatched
            log.exception("reconciling %s", machine_id)
    _reconcile_links(host, links)
    snapshots_settle_stuck(host)


def _out_of_step(state: str, running: bool, paused: bool, stuck: bool) -> bool:
    """Whether the row's state and its machine's disagree, or its transition is stuck: the
    instances _reconcile has something to do for."""
    if state == PowerState.RUNNING:
        return not running or paused
    if state == PowerState.PAUSED:
        return not paused
    if state in (PowerState.STOPPED, PowerState.FAILED):
        return running
    return state in POWER_TRANSITIONAL and stuck


def _reconcile(pk: int, status: MachineStatus, stuck_before: datetime) -> None:
    instance = Instance.objects.select_related("project").filter(pk=pk).first()
    if instance is None:  # deleted during the pass
        return
    backend = backend_named(instance.backend)
    state, running = instance.power_state, status.power == Power.RUNNING
    if state == PowerState.RUNNING and running and status.paused:
        settle(instance.pk, state, PowerState.PAUSED, DISK_FULL_ADVICE)
    elif state == PowerState.PAUSED and not (running and status.paused):
        # resumed, or ended: as Running, the next pass sees which
        settle(instance.pk, state, PowerState.RUNNING)
    elif state == PowerState.RUNNING and not running:
        _stopped_by_itself(instance, status.exit)
    elif state in (PowerState.STOPPED, PowerState.FAILED) and running:
        if instance.run_strategy != RunStrategy.HALTED:
            settle(instance.pk, state, PowerState.RUNNING)
            return
        # Halted keeps it off, whatever started it; read afresh, as a pass takes a while and
        # the user may have changed the strategy and pressed Start since it read this row
        if not Instance.objects.filter(
            pk=instance.pk, power_state=state, run_strategy=RunStrategy.HALTED
        ).exists():
            return
        backend.force_stop(instance.machine_id)
        audit_record(
            actor=None,
            action="instance.force_stop",
            project=instance.project,
            target=instance,
            message="Found running under the Halted run strategy, which keeps it off.",
        )
    elif state in POWER_TRANSITIONAL and instance.state_changed_at < stuck_before:
        if _restart_lost(instance, running):
            return
        settle_stuck(instance, running, "on its host")


def _reconcile_links(host: str, links: dict[int, dict[str, bool]]) -> None:
    """Links of running machines (instance -> NIC name -> up) against their NICs' rows: a link
    set while the instance started is applied now, and a carrier that the host or the guest's
    latest report changed is recorded. Two queries, whatever the number of NICs."""
    if not links:
        return
    running = Instance.objects.filter(
        host=host, backend__in=LOCAL_BACKENDS, power_state=PowerState.RUNNING
    )
    current = GuestReport.objects.filter(
        instance__in=running, reported_at__gte=F("instance__state_changed_at")
    )  # reports of the current run (GuestReport.current_for)
    reports = {
        pk: (reported_at, interfaces)
        for pk, reported_at, interfaces in current.values_list(
            "instance_id", "reported_at", "interfaces"
        )
    }
    nics = NetworkInterface.objects.filter(instance__in=running).values_list(
        "pk", "instance_id", "index", "link_desired", "carrier", "mac", "link_changed_at"
    )
    for nic_pk, instance_id, index, desired, carrier, mac, link_changed_at in nics:
        machine_links = links.get(instance_id, {})
        if nic_name(index) not in machine_links:  # added while it runs: plugged at next start
            continue
        up = machine_links[nic_name(index)]
        try:
            if up != (desired == LinkState.UP):  # changed while it started: apply it
                machine_set_link(nic_pk)  # in this pass: a task queued each pass would pile up
                continue
            reported_at, interfaces = reports.get(instance_id, (None, []))
            seen = carrier_from(up, mac, link_changed_at, reported_at, interfaces)
            if carrier != seen:
                NetworkInterface.objects.filter(pk=nic_pk, carrier=carrier).update(carrier=seen)
        except BackendError as error:
            log.warning(
                "reconciling the links of %s: %s",
                Instance.machine_id_of(instance_id),
                error.message,
            )
        except Exception:
            log.exception("reconciling the links of %s", Instance.machine_id_of(instance_id))


def settle_stuck(instance: Instance, running: bool, where: str) -> None:
    """Settle a transitional state whose task was lost to what runs, saying so."""
    settled = PowerState.RUNNING if running else PowerState.STOPPED
    message = (
        f"{instance.get_power_state_display()} did not finish within "
        f"{STUCK_AFTER_SECONDS // 60} minutes (its worker may have stopped); the instance "
        f"is {settled.label.lower()} {where}."
    )
    since = instance.state_changed_at
    settle(instance.pk, instance.power_state, settled, message, since=since)


def _restart_lost(instance: Instance, running: bool) -> bool:
    """An automatic restart (restarts_in_a_row counts them; any user request resets it) whose
    task was lost with its worker is asked for again, rather than left off under a strategy
    that wants the guest running. Whether it was."""
    if not (
        instance.power_state == PowerState.STARTING
        and not running
        and 0 < instance.restarts_in_a_row < LOST_RESTARTS_MAX
        and instance.run_strategy in AUTO_RESTART_STRATEGIES
    ):
        return False
    now = timezone.now()
    with transaction.atomic():
        if settle(
            instance.pk,
            PowerState.STARTING,
            PowerState.STARTING,  # claimed afresh: the next stuck check is minutes away again
            "The automatic restart did not begin in time (its worker may have stopped); it was "
            "asked for again.",
            since=instance.state_changed_at,
            at=now,
            restarts_in_a_row=F("restarts_in_a_row") + 1,  # so that this, too, gives up
        ):
            enqueue_host_task(instance, "instances.machine_start", instance.pk, now.isoformat())
    return True


def restart_delay(in_a_row: int) -> int:
    """Seconds before an automatic restart: at once the first time, then backing off (10 s,
    20 s, 40 s ... up to 2 minutes) while the guest keeps stopping soon after each start."""
    if in_a_row <= 1:
        return 0
    return int(min(RESTART_DELAY_MAX, 10 * 2 ** (in_a_row - 2)))


def _stopped_by_itself(instance: Instance, exit_kind: ExitKind) -> None:
    last_exit = LastExit(exit_kind.value) if exit_kind != ExitKind.NONE else LastExit.CRASHED
    restart = restart_wanted(instance.run_strategy, exit_kind)
    message = f"{last_exit.label}; run strategy {instance.run_strategy}."
    in_a_row, delay = 0, 0
    if restart:  # running since state_changed_at: a short run continues a series of restarts
        short = timezone.now() - instance.state_changed_at < timedelta(seconds=STEADY_RUN_SECONDS)
        in_a_row = min(instance.restarts_in_a_row + 1, 1000) if short else 1
        delay = restart_delay(in_a_row)
        if delay:
            message += f" Restarting in {delay} s: restart {in_a_row} in a row."
    now = timezone.now()
    with transaction.atomic():
        if not settle(
            instance.pk,
            PowerState.RUNNING,
            PowerState.STARTING if restart else PowerState.STOPPED,
            message if delay else "",
            at=now,  # the restart's claim: no other Start's task acts on it, nor it on theirs
            last_exit=last_exit,
            auto_restarts=F("auto_restarts") + (1 if restart else 0),
            restarts_in_a_row=in_a_row,
        ):
            return
        audit_record(
            actor=None,
            action="instance.auto_restart" if restart else "instance.stopped",
            project=instance.project,
            target=instance,
            outcome=Outcome.FAILURE if exit_kind == ExitKind.CRASHED else Outcome.SUCCESS,
            message=message,
        )
        if restart:
            enqueue_host_task(
                instance, "instances.machine_start", instance.pk, now.isoformat(), countdown=delay
            )
