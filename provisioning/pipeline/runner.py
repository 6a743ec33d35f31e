"""The runner that claims and runs a job's steps (pipeline.steps names them).

`job_advance` runs a transitional job's first step not done. A conditional UPDATE claims it
(pending, or a lapsed lease, at the attempt count read), so one worker wins. Transient
CloudErrors retry with bounded backoff (only the first attempt creates without a lookup);
success queues the next step on commit, a permanent error fails the step and the job.
"""

import logging
import time
import traceback
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from provisioning.choices import (
    DONE_STATUS,
    JOB_TRANSITIONAL,
    RUNNING_STATUS,
    JobStatus,
    Phase,
    StepStatus,
)
from provisioning.clouds import steps_for_account
from provisioning.clouds.context import StepContext
from provisioning.clouds.errors import CloudError
from provisioning.infra import InfraConfig
from provisioning.models import JobStep, ProvisioningJob
from provisioning.pipeline.steps import STEPS, Run, steps_for
from provisioning.pipeline.writer import StepWriter, lease_end

log = logging.getLogger(__name__)


def job_tags(job: ProvisioningJob) -> dict[str, str]:
    return {
        "zopday:job": str(job.pk),
        "zopday:token": job.token,
        "zopday:project": job.project.slug,
        "zopday:managed-by": "zopday-console",
    }


def append_steps(job: ProvisioningJob, phase: str, config: InfraConfig) -> list[JobStep]:
    """Add the steps of a phase after the job's existing steps."""
    last = job.steps.order_by("-position").values_list("position", flat=True).first() or 0
    return JobStep.objects.bulk_create(
        JobStep(job=job, position=last + offset, phase=phase, name=name)
        for offset, name in enumerate(steps_for(phase, config), start=1)
    )


def queue_advance(job_id: int) -> None:
    """Queue the job's next step once the surrounding transaction has committed."""
    from instances.services.queueing import send_on_commit

    send_on_commit("provisioning.advance", job_id, queue=settings.ZOPDAY_PROVISIONING_QUEUE)


def next_step(job: ProvisioningJob) -> JobStep | None:
    return (
        job.steps.filter(status__in=[StepStatus.PENDING, StepStatus.RUNNING])
        .order_by("position")
        .first()
    )


def _claim(step: JobStep) -> bool:
    """Take the step: pending, or running with a lapsed lease, and still at the attempt count we
    read. Counting on that count makes `step.attempts` exact afterwards without reading it back:
    whether this is the step's first attempt decides whether its lookups may be skipped."""
    now = timezone.now()
    lease_until = lease_end()
    claimable = Q(status=StepStatus.PENDING) | Q(status=StepStatus.RUNNING, lease_until__lt=now)
    claimed = JobStep.objects.filter(claimable, pk=step.pk, attempts=step.attempts).update(
        status=StepStatus.RUNNING,
        attempts=step.attempts + 1,
        started_at=now,
        finished_at=None,
        lease_until=lease_until,
        message="",
    )
    if claimed:
        step.status, step.attempts, step.started_at = StepStatus.RUNNING, step.attempts + 1, now
        step.finished_at, step.lease_until, step.message = None, lease_until, ""
    return bool(claimed)


def job_advance(job_id: int) -> bool:
    """Run the job's next step; True when another step should be queued."""
    job = ProvisioningJob.objects.select_related("account", "project").filter(pk=job_id).first()
    if job is None or job.status not in JOB_TRANSITIONAL:
        return False
    # The next step and the one after it: whether another step follows is known without asking
    # again (no steps are added while the job runs; a cancel is seen by the next advance).
    not_done = job.steps.filter(status__in=[StepStatus.PENDING, StepStatus.RUNNING])
    upcoming = list(not_done.order_by("position")[:2])
    if not upcoming:
        _finish_phase(job)
        return False
    step = upcoming[0]
    if not _claim(step):
        return False  # another worker runs it, or just finished it
    if job.status == JobStatus.PENDING:
        ProvisioningJob.objects.filter(pk=job.pk, status=JobStatus.PENDING).update(
            status=RUNNING_STATUS[Phase(job.phase)], updated_at=timezone.now()
        )
    if not _run_step(job, step):
        return False
    if len(upcoming) > 1:
        return True
    # The phase's last step: settle the phase. Steps added meanwhile (a job cancelled during
    # this step, then deleted: its teardown) are not this phase's: queue them.
    _finish_phase(job)
    return job.steps.filter(status=StepStatus.PENDING).exists()


def _run_step(job: ProvisioningJob, step: JobStep) -> bool:
    config = InfraConfig.from_json(job.config)
    writer = StepWriter(job, step, config)
    ctx = StepContext(
        job_id=job.pk,
        step_id=step.pk,
        token=job.token,
        name=job.name,
        tags=job_tags(job),
        log=writer.log,
        heartbeat=writer.heartbeat,
        save=writer.save,
    )
    function = STEPS[step.name].run
    attempts = settings.ZOPDAY_PROVISIONING_RETRY_ATTEMPTS
    base = settings.ZOPDAY_PROVISIONING_RETRY_BASE_SECONDS
    for try_number in range(1, attempts + 1):
        if try_number > 1:
            JobStep.objects.filter(pk=step.pk).update(
                attempts=F("attempts") + 1, lease_until=lease_end()
            )
            step.attempts += 1
        ctx.first_attempt = step.attempts == 1
        try:
            run = Run(
                job=job, config=config, cloud=steps_for_account(job.account, job.region), ctx=ctx
            )
            message = function(run)
        except CloudError as error:
            writer.log(f"{'transient' if error.retryable else 'error'}: {error.message}")
            if error.retryable and try_number < attempts:
                delay = base * 2 ** (try_number - 1)
                writer.log(f"retrying in {delay:g} s (try {try_number + 1} of {attempts})")
                writer.flush()
                time.sleep(delay)
                continue
            _fail(job, writer, error.message)
            return False
        except Exception as error:  # a bug of ours: the user sees a short reason, logs the rest
            log.exception("step %s of job %s", step.name, job.pk)
            writer.log("internal error: " + traceback.format_exception_only(error)[-1].strip())
            _fail(job, writer, f"Internal error in {step.name}: {error}")
            return False
        writer.finish(
            status=StepStatus.SUCCEEDED,
            finished_at=timezone.now(),
            lease_until=None,
            message=message[:1000],
        )
        return True
    return False  # not reached: the last try either returns or fails


def _fail(job: ProvisioningJob, writer: StepWriter, message: str) -> None:
    now = timezone.now()
    step = writer.step
    with transaction.atomic():
        writer.finish(
            status=StepStatus.FAILED, finished_at=now, lease_until=None, message=message[:1000]
        )
        ProvisioningJob.objects.filter(pk=job.pk, status__in=JOB_TRANSITIONAL).update(
            status=JobStatus.FAILED,
            message=f"{step.name} failed: {message}"[:1000],
            finished_at=now,
            updated_at=now,
        )
        from instances.choices import Outcome
        from instances.services import audit_record

        audit_record(
            actor=None,
            action=f"provisioning.{job.phase}",
            project=job.project,
            target=job,
            outcome=Outcome.FAILURE,
            message=f"{step.name}: {message}"[:1000],
        )


def _finish_phase(job: ProvisioningJob) -> None:
    """Settle the phase the caller read, if it is still the job's and no step of it is left: a
    job cancelled during its last step and then deleted has moved on to its teardown, whose
    steps must not be skipped by the old phase's finish."""
    now = timezone.now()
    status = DONE_STATUS[Phase(job.phase)]
    steps_left = JobStep.objects.filter(
        job=OuterRef("pk"), status__in=[StepStatus.PENDING, StepStatus.RUNNING]
    )
    ProvisioningJob.objects.filter(
        ~Exists(steps_left), pk=job.pk, phase=job.phase, status__in=JOB_TRANSITIONAL
    ).update(status=status, message="", finished_at=now, updated_at=now)


def job_advance_for(job_id: int, seconds: float) -> bool:
    """Run the job's steps one after another in this worker for up to `seconds` (a step that
    started runs to its end); True when steps remain, to be queued. A message per step would
    cost a broker round trip between steps; the slice keeps a long job from holding a worker
    while other jobs wait."""
    deadline = time.monotonic() + seconds
    while job_advance(job_id):
        if time.monotonic() >= deadline:
            return True
    return False


def job_run_inline(job_id: int) -> ProvisioningJob:
    """Run every remaining step in this process (management commands, tests, benchmarks)."""
    while job_advance(job_id):
        pass
    return ProvisioningJob.objects.get(pk=job_id)


def _stalled(step: JobStep, now: datetime, quiet_since: datetime, job: ProvisioningJob) -> bool:
    if step.status == StepStatus.RUNNING:
        return bool(step.lease_until and step.lease_until < now)
    return job.updated_at < quiet_since


def jobs_resume_stalled() -> list[int]:
    """Queue the jobs whose next step nobody is working on: its worker died (lease lapsed), or
    its message was lost. The claim makes a duplicate message harmless."""
    now = timezone.now()
    quiet_since = now - timedelta(seconds=settings.ZOPDAY_PROVISIONING_LEASE_SECONDS)
    resumed = []
    for job in ProvisioningJob.objects.filter(status__in=JOB_TRANSITIONAL):
        step = next_step(job)
        if step is None or _stalled(step, now, quiet_since, job):
            resumed.append(job.pk)
    for job_id in resumed:
        queue_advance(job_id)
    return resumed
