"""Celery tasks of the instances app: thin wrappers that take ids and call one service.

Node-local tasks (everything that touches a machine) are sent to the instance's host queue by
services.queueing; the periodic reconcile and guest reports fan out to every host that has
instances.
"""

import logging

from celery import Task, current_app, shared_task
from celery.exceptions import Retry
from celery.utils.time import get_exponential_backoff_interval
from django.conf import settings
from django.db import close_old_connections

from instances.backends import LOCAL_BACKENDS
from instances.backends.base import BackendError
from instances.choices import SyncTrigger
from instances.disk_full import disk_full_told, is_disk_full
from instances.gitops import sync
from instances.models import GitSource, Instance
from instances.power_operations import POWER, POWER_OPERATIONS, PowerOperation
from instances.services import (
    cluster_settle,
    device_work,
    guest_reports,
    host_work,
    image_import_work,
    machines,
    reconciler,
    snapshot_work,
)

log = logging.getLogger(__name__)


# a message header: how often lost work was sent again (services.host_work)
RESENT_HEADER = "zopday_resent"
LOST_RESENDS_MAX = 3  # past this, work whose worker keeps dying during it fails


class HostTask(Task):
    """Work on one host, recorded there while it runs and while a retry of it waits
    (services.host_work): when its worker dies meanwhile, the host's next reconcile pass sends
    it again, and after LOST_RESENDS_MAX such deaths fails it through on_failure. Every host
    task is safe to run again."""

    def __call__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if self.request.called_directly:
            return self.run_once(*args, **kwargs)
        resent = getattr(self.request, RESENT_HEADER, None)
        if resent is None:
            resent = (self.request.headers or {}).get(RESENT_HEADER, 0)
        queue = (self.request.delivery_info or {}).get("routing_key") or ""
        lost = host_work.Lost(self.name, list(args), kwargs, queue, int(resent))
        with host_work.work_in_hand(lost) as record:
            host_work.release_retry(self.request.id)  # this is that retry: the new record holds
            try:
                return self.run_once(*args, **kwargs)
            except Retry:
                if not self.request.is_eager:  # an eager retry has run already
                    record.keep_for_retry(self.request.id)
                raise

    def run_once(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        """One run of the work; a subclass may turn an error into a retry here."""
        return super().__call__(*args, **kwargs)


def send_lost_work_again(host: str) -> None:
    """Send again the host work whose worker died, or fail it when that keeps happening."""
    for lost in host_work.lost_work(host):
        task = current_app.tasks.get(lost.task)
        if task is None or not lost.queue:
            log.warning("lost work %s%s cannot be sent again", lost.task, tuple(lost.args))
            continue
        if lost.resent >= LOST_RESENDS_MAX:
            error = BackendError(
                f"The host's worker stopped during this work {lost.resent + 1} times; it was "
                "given up."
            )
            task.on_failure(error, "", lost.args, lost.kwargs, None)
            continue
        log.warning("sending %s%s again: its worker stopped", lost.task, tuple(lost.args))
        task.apply_async(
            args=lost.args,
            kwargs=lost.kwargs,
            queue=lost.queue,
            headers={RESENT_HEADER: lost.resent + 1},
        )


class PowerTask(HostTask):
    """A power operation on one instance: its id, then the time of the request's claim (absent
    in the reconciler's restarts). An unexpected error settles the instance at once."""

    action = ""  # a key of instances.power_operations.POWER

    def on_failure(self, exc, task_id, args, kwargs, einfo):  # type: ignore[no-untyped-def]
        transitional = POWER[self.action].transitional
        claimed_at = args[1] if len(args) > 1 else None
        message = exc.message if isinstance(exc, BackendError) else ""
        close_old_connections()  # the error may have been the database's; Celery's close is later
        try:
            machines.power_task_failed(args[0], self.action, transitional, claimed_at, message)
        except Exception:  # the reconciler settles it later, as a stuck transition
            log.exception("settling instance %s after its failed %s", args[0], self.action)


def _power_task(operation: PowerOperation) -> Task:
    """The host task of one power operation: machines.machine_<name>."""
    work = getattr(machines, f"machine_{operation.name}")

    def run(instance_id: int, claimed_at: str | None = None) -> None:
        work(instance_id, claimed_at)

    run.__name__ = run.__qualname__ = f"machine_{operation.name}"
    return shared_task(name=operation.task, base=PowerTask, action=operation.name)(run)


POWER_TASKS = {operation.name: _power_task(operation) for operation in POWER_OPERATIONS}


class DeviceTask(HostTask):
    """Node work on a disk, an interface or a machine's files, by id. An error the backend calls
    retryable (a busy monitor, an agent not up yet) is tried again, three times, backing off;
    any other is final at once. A final failure is told on the instance (machines)."""

    max_retries = 3
    retry_backoff_factor = 1  # seconds: a retry waits 1 to 2, 3 or 5 times this

    def run_once(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            return super().run_once(*args, **kwargs)
        except BackendError as error:
            if not error.retryable:
                raise
            wait = self.retry_backoff_factor + get_exponential_backoff_interval(
                self.retry_backoff_factor, self.request.retries, 600, full_jitter=True
            )
            raise self.retry(exc=error, countdown=wait) from error

    def on_failure(self, exc, task_id, args, kwargs, einfo):  # type: ignore[no-untyped-def]
        message = exc.message if isinstance(exc, BackendError) else "see the worker's log."
        if is_disk_full(exc) and not isinstance(exc, BackendError):
            message = "the host's disk is full: free space on it, then try again."
            disk_full_told(f"{self.name} failed")
        close_old_connections()  # the error may have been the database's
        try:
            device_work.device_task_failed(self.name, args[0], message)
        except Exception:
            log.exception("recording the failure of %s%s", self.name, tuple(args))


@shared_task(name="instances.machine_undefine", base=DeviceTask)
def machine_undefine(
    backend_name: str, machine_id: str, disk_names: list[str] | None = None
) -> None:
    """Messages sent before the disk names came along remove the machine only."""
    device_work.machine_undefine(backend_name, machine_id, disk_names or [])


@shared_task(name="instances.disk_file_delete")
def disk_file_delete(backend_name: str, disk_name: str) -> None:
    """A deleted free disk's file, on the host that holds it."""
    device_work.disk_file_delete(backend_name, disk_name)


@shared_task(name="instances.nic_set_link", base=DeviceTask)
def nic_set_link(nic_id: int) -> None:
    device_work.machine_set_link(nic_id)


@shared_task(name="instances.disk_hotplug", base=DeviceTask)
def disk_hotplug(disk_id: int) -> None:
    device_work.disk_hotplug(disk_id)


@shared_task(name="instances.disk_resize", base=DeviceTask)
def disk_resize(disk_id: int) -> None:
    device_work.disk_resize(disk_id)


# a snapshot QEMU is still writing keeps its monitor busy for as long as the call's timeout
@shared_task(name="instances.disk_snapshot", base=DeviceTask, retry_backoff_factor=30)
def disk_snapshot(snapshot_id: int) -> None:
    snapshot_work.disk_snapshot(snapshot_id)


@shared_task(name="instances.instance_snapshot", base=DeviceTask, retry_backoff_factor=30)
def instance_snapshot(snapshot_ids: list[int]) -> None:
    """The snapshots of one name of an instance's disks, taken together."""
    snapshot_work.snapshots_take(snapshot_ids)


@shared_task(name="instances.disk_snapshot_delete", base=DeviceTask, retry_backoff_factor=30)
def disk_snapshot_delete(snapshot_id: int) -> None:
    snapshot_work.disk_snapshot_delete(snapshot_id)


@shared_task(name="instances.disk_snapshot_revert", base=DeviceTask)
def disk_snapshot_revert(snapshot_id: int) -> None:
    snapshot_work.disk_snapshot_revert(snapshot_id)


@shared_task(name="instances.cdrom_change", base=DeviceTask)
def cdrom_change(disk_id: int) -> None:
    device_work.cdrom_change(disk_id)


@shared_task(
    name="instances.image_import", time_limit=settings.ZOPDAY_IMPORT_DEADLINE_SECONDS + 600
)
def image_import(import_id: int, attempt: int) -> None:
    """Download an image from its URL into the project (services.image_import_work), on this
    host's import queue (services.import_slots), apart from its host work."""
    image_import_work.image_import_run(import_id, attempt)


@shared_task(name="instances.reconcile_host")
def reconcile_host(host: str) -> None:
    """Work a dead worker left is sent again first, then the host's instances are reconciled."""
    send_lost_work_again(host)
    if host == settings.ZOPDAY_HOST:  # imports run on the host of the images folder
        image_import_work.image_imports_sweep()
    reconciler.reconcile_host(host)


@shared_task(name="instances.reconcile")
def reconcile() -> None:
    """Fan out: each host's worker reconciles the instances it runs."""
    for host in _hosts():
        reconcile_host.apply_async(args=[host], queue=f"host.{host}", expires=10)
    if cluster_settle.anything_stuck():
        settle_stuck_on_clusters.apply_async(queue=settings.ZOPDAY_CLOUD_QUEUE, expires=10)


@shared_task(name="instances.settle_stuck_on_clusters")
def settle_stuck_on_clusters() -> None:
    cluster_settle.settle_stuck_on_clusters()


@shared_task(name="instances.guest_reports_host")
def guest_reports_host(host: str) -> None:
    guest_reports.guest_reports_host(host)


@shared_task(name="instances.guest_reports")
def guest_reports_all() -> None:
    """Fan out: each host's worker asks the guest agents of the instances it runs."""
    expires = settings.ZOPDAY_GUEST_REPORT_SECONDS
    for host in _hosts():
        guest_reports_host.apply_async(args=[host], queue=f"host.{host}", expires=expires)
    guest_reports_clusters.apply_async(queue=settings.ZOPDAY_CLOUD_QUEUE, expires=expires)


@shared_task(name="instances.guest_reports_clusters")
def guest_reports_clusters() -> None:
    guest_reports.guest_reports_clusters()


def _hosts() -> set[str]:
    """This host and every other that has local instances."""
    local = Instance.objects.filter(backend__in=LOCAL_BACKENDS)
    return {*local.values_list("host", flat=True).distinct(), settings.ZOPDAY_HOST}


@shared_task(name="instances.gitops_sync")
def gitops_sync(source_id: int, trigger: str, requested_by: str = "") -> None:
    """One sync of a git source (a source already syncing runs again once it is done)."""
    sync.git_source_sync(source_id=source_id, trigger=trigger, requested_by=requested_by)


@shared_task(name="instances.gitops_poll")
def gitops_poll() -> None:
    """The schedule: a sync of every source not syncing now, which records only news."""
    for source_id in GitSource.objects.filter(sync_started_at__isnull=True).values_list(
        "pk", flat=True
    ):
        gitops_sync.apply_async(
            args=[source_id, SyncTrigger.SCHEDULE], expires=settings.ZOPDAY_GITOPS_POLL_SECONDS
        )
