"""Celery tasks of the provisioning app: thin, named, ids as arguments."""

from celery import shared_task
from django.conf import settings

from provisioning import pipeline
from provisioning.services import schedules, vms


@shared_task(
    name="provisioning.advance",
    acks_late=True,
    ignore_result=True,
    time_limit=settings.ZOPDAY_PROVISIONING_TASK_TIME_LIMIT,
    soft_time_limit=settings.ZOPDAY_PROVISIONING_TASK_TIME_LIMIT - 60,
)
def advance(job_id: int) -> None:
    """Run the job's next steps for a time slice; queue the rest. Nobody reads its result (the
    job's rows are the record), so none is stored."""
    if pipeline.job_advance_for(job_id, settings.ZOPDAY_PROVISIONING_SLICE_SECONDS):
        pipeline.queue_advance(job_id)


@shared_task(name="provisioning.resume_stalled")
def resume_stalled() -> list[int]:
    """Periodic: pick up jobs whose worker died mid-step."""
    return pipeline.jobs_resume_stalled()


@shared_task(name="provisioning.refresh_vms")
def refresh_vms() -> list[int]:
    """Periodic: read the state of landed jobs' VMs back from the cloud (each job is claimed, so
    overlapping runs never refresh it twice)."""
    return vms.jobs_refresh_vms()


@shared_task(name="provisioning.apply_schedules")
def apply_schedules() -> list[int]:
    """Periodic: stop or start Fixed pools whose ZopNight schedule reached an edge."""
    return schedules.schedules_apply()
