"""The details page's power panel: the state badge and one button per power operation."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from instances.access import instance_for_user
from instances.confirm import asked_first
from instances.errors import ActionRefused
from instances.http import AuthedRequest
from instances.power_operations import POWER
from instances.services import power
from instances.views.details import detail_context, detail_url
from instances.views.polling import still_shown


@login_required
def instance_power_panel(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
    """The state badge and power buttons: polled every second while the state is transitional,
    and slowly while settled (204 No Content while it shows the same; instances.views.polling)."""
    instance, role = instance_for_user(request.user, project_slug, pk)
    context = detail_context(instance, role, tab="")
    unchanged = still_shown(request, str(context["panel_version"]))
    if unchanged and not instance.is_transitional:
        return unchanged
    return render(request, "instances/instance_detail.html#power-panel", context)


@require_POST
@login_required
def instance_power(request: AuthedRequest, project_slug: str, pk: int, action: str) -> HttpResponse:
    """POST power/<name>/ of a declared power operation (instances.power_operations)."""
    instance, role = instance_for_user(request.user, project_slug, pk)
    operation = POWER.get(action)
    if operation is None:
        return HttpResponse(status=404)
    if (
        operation.question
        and operation.rule(instance, role)
        and (page := asked_first(request, operation.question, instance, back=detail_url(instance)))
    ):
        return page
    try:
        power.instance_power(instance=instance, actor=request.user, operation=operation)
    except ActionRefused as refused:
        messages.error(request, refused.message)
    instance.refresh_from_db()
    if request.htmx:
        return render(
            request,
            "instances/instance_detail.html#power-panel",
            detail_context(instance, role, tab=""),
        )
    return redirect("instance-detail", project_slug=project_slug, pk=pk)
