"""Provisioning jobs over the JSON API: POST/GET /provisioning-jobs and GET/PATCH/DELETE
/provisioning-jobs/{id}, with the same auth and error bodies as the instances API.

PATCH takes `{"vmOp": "attach_lb" | "detach_lb"}`, a new load balancer health check
(`health_check_path`, `health_check_port`), or a ZopNight stop schedule (`schedule`,
`schedule_tz`); DELETE starts the ordered teardown. Each answers 202
with the job: its steps then run on the workers.
"""

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.responses import Status

from instances.access import object_for_user, project_role
from instances.api.auth import request_user
from instances.api.errors import ERRORS, REFUSALS
from instances.api.lookups import project_for
from instances.api.schemas import Id, In, Number, Slug, Text
from instances.choices import Role
from instances.models import Project
from instances.selectors import projects_for_user
from provisioning.actions import VM_OPS, job_allowed_actions
from provisioning.clouds import DEFAULT, cloud_for
from provisioning.filters import JobFilterSet
from provisioning.infra import InfraConfig
from provisioning.models import CloudAccount, ProvisioningJob
from provisioning.services import jobs
from provisioning.space import name_clash
from provisioning.validation import config_errors, name_errors, provider_errors

router = Router(tags=["provisioning"])
# What each cloud checks in its own way: not checked while the provider is wrong.
CLOUD_FIELDS = ("region", "instance_type", "exec_mode", "image_id", "existing_vpc_id",
                "existing_subnet_id")  # fmt: skip


class JobIn(In):
    """A field it does not know is refused (a misspelt asg_max would make a group of one)."""

    project: Slug
    account: Id
    name: Text
    provider: Text = DEFAULT.name
    region: Text = ""
    pool_mode: Text = "Fixed"
    instance_count: Number = 1
    asg_min: Number = 1
    asg_max: Number = 1
    asg_desired: Number = 1
    instance_type: Text = ""  # the provider's smallest: t3.micro, e2-small
    disk_gb: Number = 20
    image_id: Text = ""
    network_mode: Text = "new"
    vpc_cidr: Text = "10.42.0.0/16"
    existing_vpc_id: Text = ""
    existing_subnet_id: Text = ""
    bootstrap_mode: Text = "default"
    load_balancer: bool = False
    health_check_path: Text = "/healthz"
    health_check_port: Number = 80
    dns_name: Text = ""
    exec_mode: Text = ""  # the provider's: SSM, OSConfig
    schedule: str = Field("", max_length=40)  # "weeknights-weekends": a stop schedule (Fixed)
    schedule_tz: Text = "UTC"


class JobPatchIn(In):
    """One change at a time: a VM op, the load balancer's health check (what is not given
    stays as it is), or a Fixed pool's ZopNight stop schedule."""

    vmOp: Text | None = None  # the product's own field name
    health_check_path: Text | None = None
    health_check_port: Number | None = None
    schedule: str | None = Field(None, max_length=40)  # "weeknights-weekends"; "" removes it
    schedule_tz: Text | None = None  # alone: the schedule's new time zone


class StepOut(Schema):
    position: int
    phase: str
    name: str
    status: str
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None
    message: str
    log: list[dict[str, str]]


class JobOut(Schema):
    id: int
    project: str
    account: int
    name: str
    provider: str
    region: str
    pool_mode: str
    status: str
    phase: str
    message: str
    config: dict[str, Any]
    steps: list[StepOut]
    allowed_actions: dict[str, bool]
    created_at: datetime
    finished_at: datetime | None


class JobFilters(Schema):
    project: Slug | None = None
    status: Text | None = None


def _out(job: ProvisioningJob, request: HttpRequest) -> dict[str, Any]:
    role = project_role(request_user(request), job.project)
    return {
        "id": job.pk,
        "project": job.project.slug,
        "account": job.account_id,
        "name": job.name,
        "provider": job.provider,
        "region": job.region,
        "pool_mode": job.pool_mode,
        "status": job.status,
        "phase": job.phase,
        "message": job.message,
        "config": job.config,
        "steps": list(job.steps.all()),
        "allowed_actions": {
            name: bool(allowed) for name, allowed in job_allowed_actions(job, role).items()
        },
        "created_at": job.created_at,
        "finished_at": job.finished_at,
    }


def _job(request: HttpRequest, job_id: int, required: Role = Role.VIEWER) -> ProvisioningJob:
    job, _ = object_for_user(
        ProvisioningJob.objects.all(), request_user(request), required, pk=job_id
    )
    return job


def _jobs() -> QuerySet[ProvisioningJob]:
    return ProvisioningJob.objects.select_related("project").prefetch_related("steps")


@router.get("/provisioning-jobs", response={200: list[JobOut], **ERRORS})
def job_list(request: HttpRequest, filters: Query[JobFilters]) -> list[dict[str, Any]]:
    """The jobs of every project you are a member of (or of one project)."""
    if filters.project:
        project, _ = project_for(request, filters.project)
        found = _jobs().filter(project=project)
    else:
        found = _jobs().filter(project__in=projects_for_user(request_user(request)))
    found = JobFilterSet({"status": filters.status}, queryset=found).qs
    return [_out(job, request) for job in found[:200]]


def job_config(
    project: Project, payload: JobIn, *, creating: bool = False
) -> tuple[CloudAccount, InfraConfig]:
    """The account and the choices a job body makes, the provider's defaults filled in, or every
    mistake at its field (manifests read ProvisioningJob documents so too). `creating`: a name
    taken is one of them."""
    errors = provider_errors(payload.provider)
    account = CloudAccount.objects.filter(project=project, pk=payload.account).first()
    if account is None:
        errors["account"] = "Choose a cloud account of this project."
    elif not errors and account.provider != payload.provider:
        errors["account"] = f"The account {account.name} is not on {payload.provider}."
    # A cloud's own fields are checked against a cloud only when the body names one.
    unchecked = set(CLOUD_FIELDS) if "provider" in errors else set()
    cloud = cloud_for(DEFAULT.name if "provider" in errors else payload.provider)
    choices = payload.model_dump(exclude={"project", "account", "name"})
    if not choices["region"] and (account is None or "account" in errors):
        unchecked.add("region")  # the account's default, once there is an account of the cloud
    choices["region"] = choices["region"] or (account.default_region if account else "")
    choices["instance_type"] = choices["instance_type"] or cloud.prices.default_machine
    choices["exec_mode"] = choices["exec_mode"] or cloud.exec_mode
    config = InfraConfig(**choices | {"provider": cloud.name})
    found = name_errors(payload.name) | config_errors(config)
    if creating and not found.get("name"):
        found["name"] = name_clash(project=project, name=payload.name, config=config)
    errors |= {field: message for field, message in found.items() if message}
    errors = {field: message for field, message in errors.items() if field not in unchecked}
    if errors or account is None:
        raise ValidationError(errors)
    return account, config


@router.post("/provisioning-jobs", response={201: JobOut, **REFUSALS})
def job_add(request: HttpRequest, payload: JobIn) -> Status:
    """Operators: check the request and queue the pipeline (7 steps, 11 with a load balancer).
    provider=azure answers with the clean Invalid stub."""
    project, _ = project_for(request, payload.project, Role.OPERATOR)
    account, config = job_config(project, payload, creating=True)
    job = jobs.job_create(
        project=project, account=account, actor=request_user(request), name=payload.name,
        config=config,
    )  # fmt: skip
    return Status(201, _out(_jobs().get(pk=job.pk), request))


@router.get("/provisioning-jobs/{job_id}", response={200: JobOut, **ERRORS})
def job_get(request: HttpRequest, job_id: Id) -> dict[str, Any]:
    return _out(_job(request, job_id), request)


@router.patch("/provisioning-jobs/{job_id}", response={202: JobOut, **REFUSALS})
def job_update(request: HttpRequest, job_id: Id, payload: JobPatchIn) -> Status:
    """`vmOp` attach_lb/detach_lb, a new `health_check_path`/`health_check_port`, or a Fixed pool's
    `schedule` (`weeknights-weekends` stops VMs outside 08:00-20:00 on weekdays; `""` removes it)
    with `schedule_tz`. The VMs are not re-provisioned."""
    job = _job(request, job_id, Role.OPERATOR)
    check = {"health_check_path": payload.health_check_path,
             "health_check_port": payload.health_check_port}  # fmt: skip
    given = [name for name, value in check.items() if value is not None]
    scheduled = [name for name in ("schedule", "schedule_tz") if getattr(payload, name) is not None]
    kinds = [
        kind for kind in (["vmOp"] if payload.vmOp is not None else [], given, scheduled) if kind
    ]
    if len(kinds) > 1:
        message = "Give vmOp, a health check or a schedule, not two of them: one change at a time."
        raise ValidationError({name: [message] for kind in kinds for name in kind})
    actor = request_user(request)
    if payload.vmOp is not None:  # an unknown one is a 422 at vmOp, with the body's other mistakes
        jobs.job_vm_op(job=job, actor=actor, op=payload.vmOp)
    elif given:
        jobs.job_health_check_set(
            job=job, actor=actor, path=payload.health_check_path,
            port=payload.health_check_port,
        )  # fmt: skip
    elif scheduled:
        schedule = payload.schedule
        if schedule is None:  # a new time zone for the schedule the job has
            schedule = InfraConfig.from_json(job.config).schedule
        jobs.job_schedule_set(job=job, actor=actor, schedule=schedule, tz=payload.schedule_tz)
    else:
        message = (
            f"Give vmOp ({', '.join(VM_OPS)}), health_check_path and/or health_check_port, or "
            "schedule (with schedule_tz)."
        )
        raise ValidationError({"vmOp": [message]})
    return Status(202, _out(_jobs().get(pk=job.pk), request))


@router.delete("/provisioning-jobs/{job_id}", response={202: JobOut, **REFUSALS})
def job_delete(request: HttpRequest, job_id: Id) -> Status:
    """Admins: the ordered teardown (detach LB; VMs; launch template; security group; IAM;
    network if the job made it) runs as tracked steps; the job ends as deleted."""
    job = _job(request, job_id, Role.ADMIN)
    jobs.job_teardown(job=job, actor=request_user(request))
    return Status(202, _out(_jobs().get(pk=job.pk), request))


@router.post("/provisioning-jobs/{job_id}/retry", response={202: JobOut, **REFUSALS})
def job_retry(request: HttpRequest, job_id: Id) -> Status:
    """Resume a failed job at its failed step."""
    job = _job(request, job_id, Role.OPERATOR)
    jobs.job_retry(job=job, actor=request_user(request))
    return Status(202, _out(_jobs().get(pk=job.pk), request))


@router.post("/provisioning-jobs/{job_id}/cancel", response={202: JobOut, **REFUSALS})
def job_cancel(request: HttpRequest, job_id: Id) -> Status:
    job = _job(request, job_id, Role.OPERATOR)
    jobs.job_cancel(job=job, actor=request_user(request))
    return Status(202, _out(_jobs().get(pk=job.pk), request))
