"""A project's git source: its page (owners connect and change it, every member sees its syncs),
Sync now, and the repository's webhook, the one view without a CSRF token: a signature instead."""

import logging
import uuid

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from instances.access import project_for_user
from instances.choices import SYNC_TRANSITIONAL, Role, SyncTrigger
from instances.gitops import services
from instances.gitops.forms import GitSourceForm
from instances.gitops.webhook import delivery_keys, pushed_branch, signature_valid
from instances.http import AuthedRequest
from instances.models import GitSource, Project

log = logging.getLogger(__name__)
SYNCS_SHOWN = 10
REPLAY = {
    "detail": "This delivery was received before: a replay is refused and nothing is synced. "
    "To sync again, push a commit or press Sync now."
}


def _source(project: Project) -> GitSource | None:
    return GitSource.objects.filter(project=project).select_related("actor").first()


def _syncs_context(project: Project) -> dict[str, object]:
    source = _source(project)
    syncs = list(source.syncs.all()[:SYNCS_SHOWN]) if source else []
    busy = source is not None and (
        source.sync_requested_at is not None
        or source.sync_started_at is not None
        or any(sync.status in SYNC_TRANSITIONAL for sync in syncs)
    )
    return {"project": project, "source": source, "syncs": syncs, "busy": busy}


@login_required
def git_source_page(request: AuthedRequest, project_slug: str) -> HttpResponse:
    """GET shows the source and its last syncs; POST (owners) connects or changes it."""
    project, role = project_for_user(request.user, project_slug)
    source = _source(project)
    form = None
    if role.allows(Role.ADMIN):
        form = GitSourceForm(request.POST or None, source=source)
    if request.method == "POST":
        project, role = project_for_user(request.user, project_slug, Role.ADMIN)
        assert form is not None
        if form.is_valid():
            services.git_source_save(
                project=project, actor=request.user, request=form.source_request()
            )
            messages.success(request, "Saved: a first sync is on its way.")
            return redirect("git-source", project_slug=project.slug)
    context = {
        **_syncs_context(project),
        "role": role,
        "form": form,
        "can_edit": role.allows(Role.ADMIN),
        "can_sync": role.allows(Role.OPERATOR),
    }
    if source is not None:
        path = reverse("git-webhook", kwargs={"webhook_id": source.webhook_id})
        context["webhook_url"] = request.build_absolute_uri(path)
        if role.allows(Role.ADMIN):
            context["webhook_secret"] = source.webhook_secret
    return render(request, "instances/git_source.html", context)


@require_GET
@login_required
def git_source_syncs(request: AuthedRequest, project_slug: str) -> HttpResponse:
    """The syncs table, polled while a sync is asked for or running; 286 stops the polling."""
    project, _ = project_for_user(request.user, project_slug)
    context = _syncs_context(project)
    response = render(request, "instances/partials/git_syncs.html", context)
    if not context["busy"]:
        response.status_code = 286
    return response


@require_POST
@login_required
def git_source_sync_now(request: AuthedRequest, project_slug: str) -> HttpResponse:
    project, _ = project_for_user(request.user, project_slug, Role.OPERATOR)
    source = _source(project)
    if source is not None:
        services.git_sync_request(
            source=source, trigger=SyncTrigger.MANUAL, requested_by=request.user.get_username()
        )
        messages.info(request, "Sync requested.")
    return redirect("git-source", project_slug=project.slug)


@require_POST
@login_required
def git_source_disconnect(request: AuthedRequest, project_slug: str) -> HttpResponse:
    project, _ = project_for_user(request.user, project_slug, Role.ADMIN)
    source = _source(project)
    if source is not None:
        services.git_source_delete(source=source, actor=request.user)
        messages.success(request, "Disconnected: what it applied stays as it is.")
    return redirect("git-source", project_slug=project.slug)


@require_POST
@login_required
def git_webhook_rotate(request: AuthedRequest, project_slug: str) -> HttpResponse:
    project, _ = project_for_user(request.user, project_slug, Role.ADMIN)
    source = _source(project)
    if source is not None:
        services.git_webhook_secret_rotate(source=source, actor=request.user)
        messages.success(request, "A new webhook secret: give it to the repository's webhook.")
    return redirect("git-source", project_slug=project.slug)


@csrf_exempt
@require_POST
def git_webhook(request: HttpRequest, webhook_id: uuid.UUID) -> HttpResponse:
    """A push: checked against the source's secret, then a sync is queued (202), once per
    delivery (409 for a replay)."""
    source = GitSource.objects.filter(webhook_id=webhook_id).first()
    if source is None:
        return JsonResponse({"detail": "No such source."}, status=404)
    body = request.body
    if not signature_valid(secret=source.webhook_secret, body=body, headers=request.headers):
        log.warning("git source %s: a webhook call with a bad signature", source.pk)
        return JsonResponse({"detail": "The signature does not match."}, status=403)
    if request.headers.get("X-GitHub-Event") == "ping":
        return JsonResponse({"detail": "Ready."})
    branch = pushed_branch(body)
    if branch is not None and branch != source.branch:
        return JsonResponse({"detail": f"A push to {branch}, not {source.branch}: ignored."})
    keys = delivery_keys(body=body, headers=request.headers)
    if not services.git_webhook_sync_request(source=source, keys=keys):
        log.warning("git source %s: a webhook delivery received before, refused", source.pk)
        return JsonResponse(REPLAY, status=409)
    return JsonResponse({"detail": "Sync queued."}, status=202)
