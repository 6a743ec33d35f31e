"""The jobs list and a job's page: live progress, its actions and its own forms."""

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from instances.access import object_for_user, project_for_user
from instances.actions import Allowed
from instances.choices import Role
from instances.confirm import question_page
from instances.errors import ActionRefused
from instances.forms import apply_errors
from instances.http import AuthedRequest
from instances.views.polling import digest, still_shown
from provisioning import actions
from provisioning.choices import (
    JOB_TRANSITIONAL,
)
from provisioning.forms import HealthCheckForm, ScheduleForm
from provisioning.infra import InfraConfig
from provisioning.models import ProvisioningJob
from provisioning.schedules import SCHEDULES
from provisioning.services import jobs


@login_required
def job_list(request: AuthedRequest, project_slug: str) -> HttpResponse:
    project, role = project_for_user(request.user, project_slug)
    found = ProvisioningJob.objects.filter(project=project).select_related("account")
    return render(
        request,
        "provisioning/job_list.html",
        {
            "project": project,
            "jobs": found,
            "can_create": actions.create(role),
        },
    )


def _job_for(request: AuthedRequest, slug: str, pk: int, required: Role = Role.VIEWER) -> Any:
    return object_for_user(
        ProvisioningJob.objects.select_related("account"), request.user, required,
        pk=pk, project__slug=slug,
    )  # fmt: skip


@login_required
def job_detail(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
    job, role = _job_for(request, project_slug, pk)
    return render(request, "provisioning/job_detail.html", _job_context(job, role))


def _job_context(
    job: ProvisioningJob,
    role: Role,
    health_form: forms.Form | None = None,
    schedule_form: forms.Form | None = None,
) -> dict[str, Any]:
    steps = list(job.steps.all())
    allowed = actions.job_allowed_actions(job, role)
    config = InfraConfig.from_json(job.config)
    config.schedule_tz = config.schedule_tz.strip() or "UTC"  # as the schedule reads it
    if health_form is None:
        health_form = HealthCheckForm(
            initial={"health_check_path": config.health_check_path,
                     "health_check_port": config.health_check_port},
            auto_id="health-%s",
        )  # fmt: skip
    if schedule_form is None:
        schedule_form = ScheduleForm(
            initial={"schedule": config.schedule, "schedule_tz": config.schedule_tz},
            auto_id="schedule-%s",
        )
    settings_version = digest(
        config.load_balancer,
        config.health_check_path,
        config.health_check_port,
        config.traffic_port,
        config.resources.get("load_balancer_dns", ""),
        config.pool_mode,
        config.schedule,
        config.schedule_tz,
        allowed.get("health_check"),
        allowed.get("schedule"),
    )
    # why VMs of the job can never start again (terminated, or a sandbox that was reset)
    gone = sorted(
        set(
            job.instances.exclude(instance__start_refusal="").values_list(
                "instance__start_refusal", flat=True
            )
        )
    )
    return {
        "project": job.project,
        "job": job,
        "steps": steps,
        "config": config,
        "gone": gone,
        "health_form": health_form,
        "schedule_form": schedule_form,
        "schedule_label": SCHEDULES.get(config.schedule, config.schedule),
        "allowed": allowed,
        "transitional": job.status in JOB_TRANSITIONAL,
        "progress_version": digest(
            job.status,
            job.message,
            job.config,
            [(s.status, s.attempts, s.message, len(s.log), s.finished_at) for s in steps],
            allowed,
            settings_version,
            gone,
        ),
        "settings_version": settings_version,
    }


@login_required
def job_progress(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
    """The steps panel: polled every second while the job runs, and slowly once it has
    settled (204 No Content while it shows the same; instances.views.polling)."""
    job, role = _job_for(request, project_slug, pk)
    context = _job_context(job, role)
    unchanged = still_shown(request, context["progress_version"])
    if unchanged and job.status not in JOB_TRANSITIONAL:
        return unchanged
    response = render(request, "provisioning/job_detail.html#progress", context)
    settings_version = context["settings_version"]
    if request.GET.get("settings", settings_version) != settings_version:
        # the health check and schedule forms show what changed too
        context["settings_oob"] = True
        response.write(render_to_string("provisioning/job_detail.html#settings", context, request))
    return response


@login_required
@require_POST
def job_action(request: AuthedRequest, project_slug: str, pk: int, action: str) -> HttpResponse:
    job, role = _job_for(request, project_slug, pk)
    url = reverse("provisioning-job-detail", args=[project_slug, pk])
    if action == "delete" and request.POST.get("confirm") != "1":
        if not (allowed := actions.delete(job, role)):
            # not tried: the teardown reads the job again, and what changed since must not let
            # it run unasked
            return _refused(request, allowed.reason, url)
        return question_page(request, "teardown", job, back=url)
    if action == "health_check":
        return _job_form(
            request, job, role, actions.health_check,
            HealthCheckForm(request.POST, auto_id="health-%s"),
            lambda data: jobs.job_health_check_set(
                job=job, actor=request.user, path=data["health_check_path"],
                port=data["health_check_port"],
            ),
            "health_form",
        )  # fmt: skip
    if action == "schedule":
        return _job_form(
            request, job, role, actions.schedule,
            ScheduleForm(request.POST, auto_id="schedule-%s"),
            lambda data: jobs.job_schedule_set(
                job=job, actor=request.user, schedule=data["schedule"], tz=data["schedule_tz"]
            ),
            "schedule_form",
        )  # fmt: skip
    services = {
        "retry": lambda: jobs.job_retry(job=job, actor=request.user),
        "cancel": lambda: jobs.job_cancel(job=job, actor=request.user),
        "delete": lambda: jobs.job_teardown(job=job, actor=request.user),
        "attach_lb": lambda: jobs.job_vm_op(job=job, actor=request.user, op="attach_lb"),
        "detach_lb": lambda: jobs.job_vm_op(job=job, actor=request.user, op="detach_lb"),
    }
    if action not in services:
        raise Http404("No such action.")
    try:
        services[action]()
    except ActionRefused as error:
        return _refused(request, error.message, url)
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


def _job_form(
    request: AuthedRequest,
    job: ProvisioningJob,
    role: Role,
    rule: Callable[[ProvisioningJob, Role | None], Allowed],
    form: forms.Form,
    save: Callable[[dict[str, Any]], object],
    shown_as: str,
) -> HttpResponse:
    """One of the job page's own forms (the health check, the stop schedule): the rule first,
    before what was posted is read; then the service; a mistake comes back at its field."""
    url = reverse("provisioning-job-detail", args=[job.project.slug, job.pk])
    if not (allowed := rule(job, role)):
        return _refused(request, allowed.reason, url)
    if form.is_valid():
        try:
            save(form.cleaned_data)
        except ActionRefused as error:
            return _refused(request, error.message, url)
        except ValidationError as error:
            apply_errors(error, form, {})
        else:
            return redirect(url)
    context = _job_context(job, role, **{shown_as: form})
    return render(request, "provisioning/job_detail.html", context)


def _refused(request: AuthedRequest, reason: str, url: str) -> HttpResponse:
    """A role that may not act is forbidden (403); any other refusal is a message on the job."""
    if "role" in reason:
        raise PermissionDenied(reason)
    messages.error(request, reason)
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
