"""Cluster instances a dead worker left between two states: the cluster's watch moves a
claimed state only where its request leads, so after STUCK_AFTER_SECONDS each settles to what
its VirtualMachineInstance shows, as the host reconciler settles local instances."""

import logging
from datetime import timedelta

from django.db.models import QuerySet
from django.utils import timezone

from instances.backends import backend_named
from instances.backends.base import BackendError, Power
from instances.choices import POWER_TRANSITIONAL
from instances.models import Instance
from instances.services.reconciler import STUCK_AFTER_SECONDS, settle_stuck
from instances.services.snapshot_work import snapshots_settle_stuck, stuck_snapshots

log = logging.getLogger(__name__)


def stuck_on_clusters() -> QuerySet[Instance]:
    before = timezone.now() - timedelta(seconds=STUCK_AFTER_SECONDS)
    return Instance.objects.filter(
        cluster__isnull=False, power_state__in=POWER_TRANSITIONAL, state_changed_at__lt=before
    )


def anything_stuck() -> bool:
    return stuck_on_clusters().exists() or stuck_snapshots("").exists()


def settle_stuck_on_clusters() -> None:
    """Each stuck cluster instance settled to its cluster's word, and the snapshot work of
    cluster instances that ran out of time failed (their host is blank)."""
    for instance in stuck_on_clusters().select_related("cluster"):
        try:
            status = backend_named(instance.backend).status(instance.machine_id)
        except BackendError as error:  # unreachable: asked again at the next pass
            log.warning("settling %s: %s", instance.machine_id, error.message)
            continue
        settle_stuck(instance, status.power == Power.RUNNING, f"on {instance.cluster}")
    snapshots_settle_stuck("")
