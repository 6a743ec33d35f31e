"""Pages: the jobs list, the wizard, the review with its cost, live progress, cloud accounts."""

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
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
from instances.models import Project
from instances.views.polling import digest, still_shown
from provisioning import actions
from provisioning.choices import (
    JOB_TRANSITIONAL,
    BootstrapMode,
    NetworkMode,
    PoolMode,
    Provider,
)
from provisioning.forms import STEP_NAMES, STEPS, CloudAccountForm, HealthCheckForm, ScheduleForm
from provisioning.infra import InfraConfig
from provisioning.models import CloudAccount, ProvisioningJob
from provisioning.pipeline import LB_STEPS, steps_for
from provisioning.prices import estimate, prices_for
from provisioning.schedules import SCHEDULES, WEEKNIGHTS_AND_WEEKENDS
from provisioning.services import jobs
from provisioning.services.accounts import account_check, account_create


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


def instances_in_words(count: int) -> str:
    return f"{count} instance{pluralize(count)}"


def _plan(config: InfraConfig) -> list[str]:
    """Every resource the job will create, in words."""
    if config.provider == Provider.GCP:
        return _gcp_plan(config)
    plan = []
    if config.network_mode == NetworkMode.NEW:
        plan += [
            f"VPC {config.vpc_cidr}",
            "private subnet (the VMs) and two public subnets",
            "internet gateway, Elastic IP and NAT gateway (egress only)",
            "two route tables (public → IGW, private → NAT)",
        ]
    else:
        plan.append(
            f"nothing in {config.existing_vpc_id}: the VMs go to {config.existing_subnet_id}"
        )
    plan += [
        "IAM role + instance profile with AmazonSSMManagedInstanceCore (exec via SSM)",
        "security group with no inbound rules (no port 22)",
        f"launch template: {config.instance_type}, {config.disk_gb} GB gp3, no key pair, "
        "no public IP, cloud-init user data",
    ]
    if config.pool_mode == PoolMode.FIXED:
        plan.append(instances_in_words(config.instance_count))
    else:
        plan.append(
            f"auto scaling group (min {config.asg_min}, max {config.asg_max}, "
            f"desired {config.asg_desired})"
        )
    if config.load_balancer:
        plan += [
            "application load balancer + its security group (HTTP in; VMs accept it on "
            f"port {config.health_check_port} only)",
            f"target group (health check GET {config.health_check_path} on "
            f"{config.health_check_port})",
            "listener HTTP :80",
            f"Route 53 record {config.dns_name}" if config.dns_name else "no DNS record",
        ]
    return plan


def _gcp_plan(config: InfraConfig) -> list[str]:
    plan = []
    if config.network_mode == NetworkMode.NEW:
        plan += [
            f"VPC network with a private subnetwork (first /24 of {config.vpc_cidr})",
            "Cloud Router with Cloud NAT (egress only)",
        ]
    else:
        plan.append(
            f"nothing in {config.existing_vpc_id}: the VMs go to {config.existing_subnet_id}"
        )
    plan += [
        "service account for the VMs, with no roles (OS Config agent enabled)",
        "firewall rules: all ingress denied, but port 22 from IAP's proxies (exec through IAP "
        "with OS Login, no public SSH)",
        f"instance template: {config.instance_type}, {config.disk_gb} GB pd-balanced, "
        "Shielded VM, no SSH keys, no public IP, cloud-init user data",
    ]
    if config.pool_mode == PoolMode.FIXED:
        where = ", spread over the region's zones" if config.instance_count > 1 else ""
        plan.append(instances_in_words(config.instance_count) + where)
    else:
        scaler = (
            f", autoscaler min {config.asg_min}, max {config.asg_max}"
            if config.asg_min != config.asg_max
            else ""
        )
        plan.append(f"regional managed instance group (size {config.asg_desired}{scaler})")
    if config.load_balancer:
        plan += [
            "global external Application Load Balancer: a global address, a forwarding rule "
            "on port 80, a target HTTP proxy and a URL map",
            f"backend service with an HTTP health check (GET {config.health_check_path} on "
            f"{config.health_check_port}) over the VMs' instance group(s)",
            "firewall rule: Google's front ends and health checkers may reach port "
            f"{config.health_check_port}",
            f"Cloud DNS A record {config.dns_name}" if config.dns_name else "no DNS record",
        ]
    return plan


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
         "plan": _plan(config), "steps": steps_for("provision", config), "cost": cost,
         "bootstrap": dict(BootstrapMode.choices).get(config.bootstrap_mode, config.bootstrap_mode),
         "schedule_errors": schedule_problems,
         "prices": prices_for(config.provider),
         "errors": errors, "lb_steps": LB_STEPS},
    )  # fmt: skip


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


@login_required
def account_list(request: AuthedRequest, project_slug: str) -> HttpResponse:
    project, role = project_for_user(request.user, project_slug)
    form = CloudAccountForm(user=request.user)
    if request.method == "POST":
        if not role.allows(Role.ADMIN):
            raise PermissionDenied("Adding a cloud account needs the admin role.")
        form = CloudAccountForm(request.POST, user=request.user)
        if form.is_valid():
            try:
                account_create(project=project, actor=request.user, **form.cleaned_data)
            except ValidationError as error:
                apply_errors(error, form, {})
            else:
                messages.success(request, "Cloud account added.")
                return redirect("provisioning-accounts", project.slug)
    return render(
        request,
        "provisioning/account_list.html",
        {"project": project, "accounts": CloudAccount.objects.filter(project=project),
         "form": form, "can_add": role.allows(Role.ADMIN),
         "can_check": role.allows(Role.OPERATOR)},
    )  # fmt: skip


@login_required
@require_POST
def account_test(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
    account, _ = object_for_user(
        CloudAccount.objects.all(), request.user, Role.OPERATOR, pk=pk, project__slug=project_slug
    )
    account = account_check(account=account, actor=request.user)
    if request.htmx:
        return render(
            request, "provisioning/account_list.html#account-row",
            {"account": account, "project": account.project, "can_check": True},
        )  # fmt: skip
    messages.info(request, account.last_check_message)
    return redirect("provisioning-accounts", project_slug)
