"""Celery tasks of the provisioning app: thin, named, ids as arguments."""

from celery import shared_task

from provisioning import pipeline


@shared_task(name="provisioning.advance", acks_late=True)
def advance(job_id: int) -> None:
    """Run the job's next step; queue the one after it."""
    if pipeline.job_advance(job_id):
        pipeline.queue_advance(job_id)


@shared_task(name="provisioning.resume_stalled")
def resume_stalled() -> list[int]:
    """Periodic: pick up jobs whose worker died mid-step."""
    return pipeline.jobs_resume_stalled()
