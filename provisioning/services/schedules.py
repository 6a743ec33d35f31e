"""Applying ZopNight stop schedules (provisioning.schedules) to ready Fixed pools.

A schedule acts at its edges only: when the hour it calls for changes (on → off, off → on) it
shuts the running VMs down (ACPI, through the same power services as the buttons) or starts the
stopped ones, and records that it did (`schedule_applied`). A VM someone starts at night or
stops by day stays as they left it until the next edge. An edge is recorded only once every VM
could be asked: one that is between two states (a start still settling) is asked again at the
next pass, a minute later.
"""

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from instances.choices import POWER_TRANSITIONAL, PowerState
from instances.errors import ActionRefused
from instances.models import Instance
from instances.services import power
from instances.services.audit import audit_record
from provisioning.choices import JobStatus, PoolMode
from provisioning.infra import InfraConfig
from provisioning.models import ProvisioningJob
from provisioning.schedules import scheduled_on

log = logging.getLogger(__name__)


def schedules_apply(now: datetime | None = None) -> list[int]:
    """Apply every ready Fixed job's schedule whose hour changed since it last acted; the ids of
    the jobs it acted on."""
    now = now or timezone.now()
    acted = []
    jobs = ProvisioningJob.objects.filter(status=JobStatus.READY).exclude(config__schedule="")
    for job_id in jobs.values_list("pk", flat=True):
        try:
            if _apply(job_id, now):
                acted.append(job_id)
        except Exception:  # one job's trouble must not stop the others'
            log.exception("applying the schedule of job %s", job_id)
    return acted


def _apply(job_id: int, now: datetime) -> bool:
    with transaction.atomic():
        job = ProvisioningJob.objects.select_for_update().get(pk=job_id)
        config = InfraConfig.from_json(job.config)
        if job.status != JobStatus.READY or not config.schedule:
            return False
        if config.pool_mode != PoolMode.FIXED:
            return False
        wanted = "on" if scheduled_on(config.schedule, config.schedule_tz, now) else "off"
        if wanted == config.schedule_applied:
            return False
        ids = [vm.console_instance_id for vm in config.vms if vm.console_instance_id]
        instances = list(
            Instance.objects.filter(pk__in=ids, project=job.project, backend=job.provider)
            .select_related("project")
            .order_by("name")
        )
        source = PowerState.STOPPED if wanted == "on" else PowerState.RUNNING
        request = power.instance_start if wanted == "on" else power.instance_shutdown
        on_its_way = PowerState.STARTING if wanted == "on" else PowerState.STOPPING
        asked, later = [], []
        for instance in instances:
            if instance.power_state == on_its_way:  # asked already (a pass ago, or by hand)
                continue
            if instance.power_state in POWER_TRANSITIONAL:
                later.append(instance.name)
                continue
            if instance.power_state != source:
                continue
            try:
                request(instance=instance, actor=None)
            except ActionRefused:  # it moved meanwhile: asked again at the next pass
                later.append(instance.name)
            else:
                asked.append(instance.name)
        if not later:
            config.schedule_applied = wanted
            job.config = config.to_json()
            job.save(update_fields=["config", "updated_at"])
        if not asked and later:
            return False
        verb = "started" if wanted == "on" else "shut down"
        message = f"ZopNight schedule: {verb} {', '.join(asked) or 'nothing'}"
        if later:
            message += f"; {', '.join(later)} between two states, asked again in a minute"
        audit_record(
            actor=None, action="provisioning.schedule", project=job.project, target=job,
            message=message,
        )  # fmt: skip
        return True
