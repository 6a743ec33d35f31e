"""Create, retry, cancel and tear down provisioning jobs, and attach/detach their LB.

Each runs in a transaction, leaves an audit event naming the acting user, and queues the job's
next step on commit.
"""

from collections.abc import Callable

from django.contrib.auth.models import AbstractBaseUser, User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from instances.access import project_role
from instances.actions import Allowed, require
from instances.choices import Role
from instances.models import Project
from instances.services import audit_record
from provisioning import actions, schedules
from provisioning.choices import JOB_TRANSITIONAL, RUNNING_STATUS, JobStatus, Phase, StepStatus
from provisioning.infra import InfraConfig
from provisioning.models import CloudAccount, ProvisioningJob
from provisioning.pipeline import append_steps, queue_advance
from provisioning.space import name_clash
from provisioning.validation import health_check_errors, validate_request


def job_create(
    *,
    project: Project,
    account: CloudAccount,
    actor: AbstractBaseUser,
    name: str,
    config: InfraConfig,
) -> ProvisioningJob:
    """Check the request, store the job with its 7 or 11 steps, and queue stepValidate."""
    require(actions.create(project_role(actor, project)))
    if account.project_id != project.pk:
        raise ValidationError({"account": "Choose a cloud account of this project."})
    config.provider = account.provider
    validate_request(name, config)
    with transaction.atomic():
        # Under the project's lock: of two jobs of one name created at once, the second is told.
        Project.objects.select_for_update().filter(pk=project.pk).first()
        if clash := name_clash(project=project, name=name, config=config):
            raise ValidationError({"name": clash})
        job = ProvisioningJob.objects.create(
            project=project,
            account=account,
            name=name,
            provider=account.provider,
            region=config.region,
            pool_mode=config.pool_mode,
            config=config.to_json(),
            created_by=actor if isinstance(actor, User) else None,
        )
        steps = append_steps(job, Phase.PROVISION, config)
        audit_record(
            actor=actor,
            action="provisioning.create",
            project=project,
            target=job,
            message=f"{len(steps)} steps on {account.name} in {config.region}",
        )
        queue_advance(job.pk)
    return job


def _claimed(
    job: ProvisioningJob,
    actor: AbstractBaseUser,
    rule: Callable[[ProvisioningJob, Role | None], Allowed],
) -> ProvisioningJob:
    """The job's row, locked until the transaction ends, once the rule holds for it as it is
    now: two clicks, or the page and the API, must not both start a phase from one state."""
    fresh = ProvisioningJob.objects.select_for_update().get(pk=job.pk)
    require(rule(fresh, project_role(actor, fresh.project)))
    return fresh


def job_retry(*, job: ProvisioningJob, actor: AbstractBaseUser) -> ProvisioningJob:
    """Resume a failed job at its failed step; the steps before it are not run again."""
    with transaction.atomic():
        job = _claimed(job, actor, actions.retry)
        failed = job.steps.filter(status=StepStatus.FAILED).order_by("position").first()
        if failed is not None:
            job.steps.filter(position__gte=failed.position).exclude(
                status=StepStatus.SUCCEEDED
            ).update(status=StepStatus.PENDING, finished_at=None, lease_until=None)
        job.status = RUNNING_STATUS[Phase(job.phase)]
        job.message = ""
        job.finished_at = None
        job.save(update_fields=["status", "message", "finished_at", "updated_at"])
        audit_record(
            actor=actor,
            action="provisioning.retry",
            project=job.project,
            target=job,
            message=f"from {failed.name}" if failed else "",
        )
        queue_advance(job.pk)
    return job


def job_cancel(*, job: ProvisioningJob, actor: AbstractBaseUser) -> ProvisioningJob:
    """Stop after the running step; the steps not started are cancelled. What was made stays
    until the job is deleted."""
    require(actions.cancel(job, project_role(actor, job.project)))
    with transaction.atomic():
        now = timezone.now()
        running = job.steps.filter(status=StepStatus.RUNNING).values_list("name", flat=True)
        message = "Cancelled: delete the job to remove what it made."
        if step := running.first():
            message = (
                f"Cancelled: {step} finishes first; then delete the job to remove what it made."
            )
        updated = ProvisioningJob.objects.filter(pk=job.pk, status__in=JOB_TRANSITIONAL).update(
            status=JobStatus.CANCELLED,
            message=message,
            finished_at=now,
            updated_at=now,
        )
        job.steps.filter(status=StepStatus.PENDING).update(
            status=StepStatus.CANCELLED, finished_at=now
        )
        if updated:
            audit_record(actor=actor, action="provisioning.cancel", project=job.project, target=job)
    job.refresh_from_db()
    return job


def _start_phase(job: ProvisioningJob, phase: Phase, config: InfraConfig) -> None:
    job.steps.filter(status__in=[StepStatus.PENDING, StepStatus.FAILED]).update(
        status=StepStatus.CANCELLED
    )
    append_steps(job, phase, config)
    job.phase = phase
    job.status = RUNNING_STATUS[phase]
    job.message = ""
    job.finished_at = None
    job.config = config.to_json()
    job.save(update_fields=["phase", "status", "message", "finished_at", "config", "updated_at"])
    queue_advance(job.pk)


def job_teardown(*, job: ProvisioningJob, actor: AbstractBaseUser) -> ProvisioningJob:
    """DELETE: the seed's ordered teardown, as tracked steps of the same job."""
    with transaction.atomic():
        job = _claimed(job, actor, actions.delete)
        _start_phase(job, Phase.TEARDOWN, InfraConfig.from_json(job.config))
        audit_record(actor=actor, action="provisioning.delete", project=job.project, target=job)
    return job


def job_health_check_set(
    *,
    job: ProvisioningJob,
    actor: AbstractBaseUser,
    path: str | None = None,
    port: int | None = None,
) -> ProvisioningJob:
    """PATCH health_check_path / health_check_port: the load balancer checks the VMs at this
    path and port from now on (stepUpdateHealthCheck); what is not given stays as it is, and
    the VMs are not touched. Mistakes in the fields come before a refusal of the job's state."""
    given = InfraConfig.from_json(job.config)
    if errors := health_check_errors(
        given.health_check_path if path is None else path,
        given.health_check_port if port is None else port,
    ):
        raise ValidationError(errors)
    with transaction.atomic():
        job = _claimed(job, actor, actions.health_check)
        config = InfraConfig.from_json(job.config)
        path = config.health_check_path if path is None else path
        port = config.health_check_port if port is None else port
        config.service_port = config.traffic_port  # the service stays where it is
        config.health_check_path, config.health_check_port = path, port
        _start_phase(job, Phase.HEALTH_CHECK, config)
        audit_record(
            actor=actor, action="provisioning.health_check", project=job.project, target=job,
            message=f"GET {path} on {port}",
        )  # fmt: skip
    return job


def job_schedule_set(
    *, job: ProvisioningJob, actor: AbstractBaseUser, schedule: str, tz: str | None = None
) -> ProvisioningJob:
    """Attach a ZopNight stop schedule to a ready Fixed pool (in time zone tz; None keeps the
    job's), or remove it (""). A new schedule acts at the next pass (each minute), bringing the
    VMs to what it calls for now; a changed time zone acts at its next edge only, and removing
    the schedule leaves the VMs as they are."""
    with transaction.atomic():
        job = _claimed(job, actor, actions.schedule)
        config = InfraConfig.from_json(job.config)
        schedule, tz = schedules.validated(schedule, config.schedule_tz if tz is None else tz)
        if schedule != config.schedule:
            config.schedule_applied = ""
        config.schedule, config.schedule_tz = schedule, tz
        job.config = config.to_json()
        job.save(update_fields=["config", "updated_at"])
        audit_record(
            actor=actor, action="provisioning.schedule", project=job.project, target=job,
            message=f"{schedules.SCHEDULES[schedule]} ({tz})" if schedule else "removed",
        )  # fmt: skip
    return job


def job_vm_op(*, job: ProvisioningJob, actor: AbstractBaseUser, op: str) -> ProvisioningJob:
    """PATCH vmOp: attach_lb creates the LB steps' resources for a landed job; detach_lb
    removes them. The VMs are not touched."""
    if op not in actions.VM_OPS:
        raise ValidationError(
            {"vmOp": f"Unknown vmOp {op!r}: use one of {', '.join(actions.VM_OPS)}."}
        )
    rule = actions.attach_lb if op == "attach_lb" else actions.detach_lb
    with transaction.atomic():
        job = _claimed(job, actor, rule)
        config = InfraConfig.from_json(job.config)
        if op == "attach_lb":
            config.load_balancer = True
        _start_phase(job, Phase(op), config)
        audit_record(actor=actor, action=f"provisioning.{op}", project=job.project, target=job)
    return job
