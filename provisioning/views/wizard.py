"""The wizard: one form per step, kept in the session, then the review with the plan and its
cost, where Create makes the job."""

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django_htmx.http import HttpResponseClientRedirect

from instances.access import project_for_user
from instances.choices import Role
from instances.errors import ActionRefused
from instances.http import AuthedRequest
from instances.models import Project
from provisioning.choices import (
    BootstrapMode,
    NetworkMode,
    PoolMode,
)
from provisioning.clouds import cloud_for
from provisioning.forms import STEP_NAMES, STEPS
from provisioning.infra import InfraConfig
from provisioning.models import CloudAccount
from provisioning.pipeline import LB_STEPS, steps_for
from provisioning.prices import estimate
from provisioning.schedules import WEEKNIGHTS_AND_WEEKENDS
from provisioning.services import jobs


def _draft_key(project: Project) -> str:
    return f"provisioning-wizard:{project.slug}"


def _draft(request: AuthedRequest, project: Project) -> dict[str, Any]:
    draft: dict[str, Any] = request.session.get(_draft_key(project), {})
    draft.setdefault("raw", {})
    draft.setdefault("values", {})
    draft.setdefault("valid", [])
    return draft


def _accounts(project: Project) -> list[tuple[int, str, str]]:
    return [(a.pk, str(a), a.provider) for a in CloudAccount.objects.filter(project=project)]


def _form_for(step: str, draft: dict[str, Any], project: Project, data: Any = None) -> Any:
    kwargs: dict[str, Any] = {"draft": draft["values"], "prefix": None}
    if step == "provider":
        kwargs.update(accounts=_accounts(project), project=project)
    raw = data if data is not None else draft["raw"].get(step)
    initial = {k: v for k, v in draft["values"].items()}
    return (
        STEPS[step](raw, initial=initial, **kwargs)
        if raw is not None
        else STEPS[step](initial=initial, **kwargs)
    )


@login_required
def wizard(request: AuthedRequest, project_slug: str, step: str = "provider") -> HttpResponse:
    """One wizard step. Back keeps what was typed without checking it; Next checks this step
    and moves on. Everything lives in the session until the review creates the job."""
    project, _ = project_for_user(request.user, project_slug, Role.OPERATOR)
    if step not in STEP_NAMES:
        raise Http404("No such wizard step.")
    draft = _draft(request, project)
    if step == "review":
        return _review(request, project, draft)
    form = _form_for(step, draft, project)
    if request.method == "POST":
        draft.pop("created", None)  # answering a step again starts the next environment
        data = request.POST.copy()
        draft["raw"][step] = {key: data.get(key) for key in data if key != "csrfmiddlewaretoken"}
        form = _form_for(step, draft, project, data=draft["raw"][step])
        index = STEP_NAMES.index(step)
        if request.POST.get("action") == "back":
            request.session[_draft_key(project)] = draft
            return _go(request, project, STEP_NAMES[max(index - 1, 0)])
        if form.is_valid():
            if step == "provider" and draft["values"].get("provider") not in (
                None,
                form.cleaned_data["provider"],
            ):  # another cloud: the later steps' answers were for the other one
                draft.update(values={}, raw={step: draft["raw"][step]}, valid=[])
            draft["values"].update(form.cleaned_data)
            draft["valid"] = sorted(set(draft["valid"]) | {step})
            request.session[_draft_key(project)] = draft
            return _go(request, project, STEP_NAMES[index + 1])
        request.session[_draft_key(project)] = draft
    return _render_wizard(request, project, step, {"form": form})


def _go(request: AuthedRequest, project: Project, step: str) -> HttpResponse:
    url = reverse("provisioning-wizard", args=[project.slug, step])
    if request.htmx:
        return HttpResponseClientRedirect(url)
    return redirect(url)


def _go_to_job(request: AuthedRequest, project: Project, pk: int) -> HttpResponse:
    url = reverse("provisioning-job-detail", args=[project.slug, pk])
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


def _render_wizard(
    request: AuthedRequest, project: Project, step: str, context: dict[str, Any]
) -> HttpResponse:
    titles = [(name, STEPS[name].title if name in STEPS else "Review") for name in STEP_NAMES]
    template = "provisioning/wizard.html"
    if request.htmx:
        template += "#wizard"
    return render(
        request,
        template,
        {"project": project, "step": step, "titles": titles,
         "first": step == STEP_NAMES[0], **context},
    )  # fmt: skip


def draft_config(values: dict[str, Any]) -> InfraConfig:
    known = InfraConfig.__dataclass_fields__
    return InfraConfig(**{k: v for k, v in values.items() if k in known})


def _review(request: AuthedRequest, project: Project, draft: dict[str, Any]) -> HttpResponse:
    """The plan, its cost and, for a Fixed pool, the stop schedule; Create makes the job once:
    its id stays in the wizard's state, and Create again (a double click, a resubmitted page)
    lands on that job."""
    if created := draft.get("created"):
        return _go_to_job(request, project, created)
    missing = [name for name in STEPS if name not in draft["valid"]]
    if missing:
        return _go(request, project, missing[0])
    account = CloudAccount.objects.filter(
        project=project, pk=draft["values"].get("account")
    ).first()
    if account is None:
        return _go(request, project, "provider")
    errors: list[str] = []
    schedule_problems: list[str] = []
    if request.method == "POST":
        # kept as typed, checked on Create: Back and a refused Create lose none of it
        draft["values"]["schedule"] = (
            WEEKNIGHTS_AND_WEEKENDS
            if request.POST.get("schedule") == WEEKNIGHTS_AND_WEEKENDS
            else ""
        )
        draft["values"]["schedule_tz"] = request.POST.get("schedule_tz", "").strip()
        request.session[_draft_key(project)] = draft
    config = draft_config(draft["values"])
    if config.pool_mode != PoolMode.FIXED:  # an ASG pool sets its own size: no schedule
        config.schedule = ""
    config.schedule_tz = config.schedule_tz or "UTC"
    if request.method == "POST":
        if request.POST.get("action") == "back":
            return _go(request, project, STEP_NAMES[-2])
        config.region = config.region or account.default_region
        try:
            job = jobs.job_create(
                project=project, account=account, actor=request.user,
                name=draft["values"]["name"], config=config,
            )  # fmt: skip
        except ValidationError as error:
            fields = error.message_dict if hasattr(error, "error_dict") else {}
            if config.pool_mode == PoolMode.FIXED:  # shown at the schedule's fields
                schedule_problems = fields.get("schedule", []) + fields.get("schedule_tz", [])
            errors = [m for m in error.messages if m not in schedule_problems]
        except ActionRefused as error:
            errors = [error.message]
        else:
            request.session[_draft_key(project)] = {"created": job.pk}
            return _go_to_job(request, project, job.pk)
    cloud = cloud_for(config.provider)
    cost = estimate(
        instance_type=config.instance_type, count=config.vm_count, disk_gb=config.disk_gb,
        load_balancer=config.load_balancer, nat=config.network_mode == NetworkMode.NEW,
        provider=config.provider,
    )  # fmt: skip
    return _render_wizard(
        request,
        project,
        "review",
        {"config": config, "account": account, "name": draft["values"]["name"],
         "plan": cloud.plan(config), "steps": steps_for("provision", config), "cost": cost,
         "bootstrap": dict(BootstrapMode.choices).get(config.bootstrap_mode, config.bootstrap_mode),
         "schedule_errors": schedule_problems,
         "prices": cloud.prices,
         "errors": errors, "lb_steps": LB_STEPS},
    )  # fmt: skip
