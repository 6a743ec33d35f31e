"""Provisioning jobs in manifests (kind: ProvisioningJob): the API's JobIn without `project`
and `name` (the document's own), the account by name. A job's choices are fixed once it is
created; pruning one starts its teardown."""

from functools import partial
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError

from instances.manifests.documents import Document
from instances.manifests.errors import ManifestInvalid, service_problems
from instances.manifests.kinds import Kind, kind_register
from instances.manifests.references import id_of
from instances.manifests.specs import fixed_problems, raise_if, spec_checked
from instances.manifests.steps import Plan, Step
from instances.models import Project
from provisioning.api import JobIn, job_config
from provisioning.choices import JobStatus
from provisioning.models import CloudAccount, ProvisioningJob
from provisioning.services import jobs

CHOOSE_ACCOUNT = "Choose a cloud account of this project."
CHOICES = [name for name in JobIn.model_fields if name not in ("project", "account", "name")]


def _jobs(project: Project) -> Any:
    return ProvisioningJob.objects.filter(project=project).exclude(status=JobStatus.DELETED)


def _plan(document: Document, project: Project, actor: AbstractBaseUser) -> Plan:
    raw, unknown = dict(document.spec), {}
    if isinstance(raw.get("account"), str):
        accounts = CloudAccount.objects.filter(project=project)
        raw["account"], missing = id_of(accounts, raw["account"], CHOOSE_ACCOUNT)
        unknown = {"account": missing} if missing else {}
    raw["project"] = project.slug
    spec = spec_checked(document, JobIn, raw, unknown)
    try:
        account, config = job_config(project, spec)
    except ValidationError as error:
        raise ManifestInvalid(service_problems(error, document.where)) from None
    label = f"{project.slug}/{document.name}"
    job = _jobs(project).filter(name=document.name).first()
    if job is None:
        plan = Plan(document, label, "create")
        plan.lines.append(f"+ {config.pool_mode} pool on {account.name} in {config.region}")
        run = partial(
            jobs.job_create, project=project, account=account, actor=actor, name=document.name,
            config=config,
        )  # fmt: skip
        plan.steps.append(Step(run))
        return plan
    current = _spec(job, False)
    wanted = {name: getattr(config, name) for name in CHOICES} | {"account": account.name}
    raise_if(
        fixed_problems(
            document,
            "provisioning job",
            {name: (current.get(name), wanted[name]) for name in wanted},
        )
    )
    return Plan(document, label)


def _spec(job: ProvisioningJob, redact: bool) -> dict[str, Any]:
    config = dict(job.config)
    return {"account": job.account.name} | {
        name: config.get(name, JobIn.model_fields[name].default) for name in CHOICES
    }


def _delete(job: ProvisioningJob, actor: AbstractBaseUser, force: bool) -> None:
    jobs.job_teardown(job=job, actor=actor)


PROVISIONING_JOB = Kind(
    name="ProvisioningJob",
    order=70,
    plan=_plan,
    find=lambda project, name: _jobs(project).filter(name=name).first(),
    objects=lambda project: _jobs(project).select_related("account").order_by("name"),
    spec_of=_spec,
    delete=_delete,
)


def provisioning_kind_register() -> None:
    kind_register(PROVISIONING_JOB)
