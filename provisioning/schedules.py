"""ZopNight stop schedules of Fixed pools: the VMs run on weekdays' working hours and are
stopped on weeknights and weekends, in the job's time zone.

The schedule acts at its edges only: when the hour it calls for changes (on → off, off → on) it
shuts the running VMs down (ACPI, through the same power services as the buttons) or starts the
stopped ones, and records that it did (`schedule_applied`). A VM someone starts at night or
stops by day stays as they left it until the next edge.
"""

import logging
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from instances.choices import PowerState
from instances.errors import ActionRefused
from instances.models import Instance
from instances.services import power
from instances.services.audit import audit_record
from provisioning.choices import JobStatus, PoolMode
from provisioning.infra import InfraConfig
from provisioning.models import ProvisioningJob

log = logging.getLogger(__name__)

WEEKNIGHTS_AND_WEEKENDS = "weeknights-weekends"
SCHEDULES = {
    "": "None: the VMs run 24×7",
    WEEKNIGHTS_AND_WEEKENDS: (
        "Stopped on weeknights and weekends (on 08:00–20:00, Monday to Friday)"
    ),
}
ON_FROM, ON_UNTIL = 8, 20  # hours of a weekday the VMs run
WEEKDAYS = range(5)  # Monday to Friday


def schedule_errors(schedule: str, tz: str) -> dict[str, str]:
    errors = {}
    if schedule not in SCHEDULES:
        choices = ", ".join(repr(name) for name in SCHEDULES)
        errors["schedule"] = f"Unknown schedule {schedule!r}: use one of {choices}."
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        errors["schedule_tz"] = f"{tz!r} is not a time zone: give one such as Europe/Paris or UTC."
    return errors


def scheduled_on(schedule: str, tz: str, now: datetime) -> bool:
    """Whether the schedule has the VMs running at `now`."""
    if not schedule:
        return True
    local = now.astimezone(ZoneInfo(tz))
    return local.weekday() in WEEKDAYS and ON_FROM <= local.hour < ON_UNTIL


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
        instances = Instance.objects.filter(pk__in=ids, backend=job.provider).order_by("name")
        source = PowerState.STOPPED if wanted == "on" else PowerState.RUNNING
        request = power.instance_start if wanted == "on" else power.instance_shutdown
        names = []
        for instance in instances.filter(power_state=source).select_related("project"):
            try:
                request(instance=instance, actor=None)
            except ActionRefused as refused:  # it moved meanwhile: left as it is
                log.info("schedule of job %s: %s: %s", job.pk, instance.name, refused.message)
            else:
                names.append(instance.name)
        config.schedule_applied = wanted
        job.config = config.to_json()
        job.save(update_fields=["config", "updated_at"])
        verb = "started" if wanted == "on" else "shut down"
        audit_record(
            actor=None, action="provisioning.schedule", project=job.project, target=job,
            message=f"ZopNight schedule: {verb} {', '.join(names) or 'nothing'}",
        )  # fmt: skip
        return True


def validated(schedule: str, tz: str) -> tuple[str, str]:
    """The schedule and time zone, or ValidationError at the field that is wrong."""
    tz = tz.strip() or "UTC"
    if errors := schedule_errors(schedule, tz):
        raise ValidationError(errors)
    return schedule, tz
