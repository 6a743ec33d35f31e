"""A cloud VM's serial output on its details page, polled from the offset the last answer ended
at: each answer appends only the new text and carries the next offset in its own poller."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from django_htmx.http import HttpResponseStopPolling

from instances import actions
from instances.access import instance_for_user
from instances.allowed import Allowed
from instances.backends import BackendError, backend_named
from instances.backends.base import ReadsSerialOutput
from instances.http import AuthedRequest
from instances.models import Instance

POLL_SECONDS = 2  # GCE's own console viewer refreshes about as often
TEMPLATE = "instances/partials/serial_output.html"


def serial_output_section(instance: Instance, allowed: Allowed) -> dict[str, object] | None:
    """The section's channel, shell command and first poller; None where it is not shown.
    Read from the database only: the cloud is called by the poll, never by the page."""
    if not allowed:
        return None
    backend = backend_named(instance.backend)
    assert isinstance(backend, ReadsSerialOutput)
    return {
        "channel": backend.serial_output_channel,
        "identity": backend.identity,
        "command": backend.shell_command(instance.machine_id),
        "poll": _poller(instance, 0, first=True),
    }


def _poller(instance: Instance, start: int, *, first: bool = False) -> dict[str, object]:
    url = reverse("instance-serial-output", args=[instance.project.slug, instance.pk])
    trigger = "load" if first else f"every {POLL_SECONDS}s"
    return {"url": f"{url}?start={start}", "trigger": trigger}


@never_cache
@require_GET
@login_required
def instance_serial_output(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
    """The output from `start` on, appended to the page; polling stops (286) once the VM is not
    running, or the cloud refuses for a reason trying again will not change."""
    instance, role = instance_for_user(request.user, project_slug, pk)
    if not (allowed := actions.serial_output(instance, role)):
        raise PermissionDenied(allowed.reason)
    raw = request.GET.get("start", "0")
    start = int(raw) if raw.isdecimal() else 0
    context: dict[str, object] = {"poll": None, "text": "", "note": ""}
    if instance.power_state not in actions.CONSOLE_STATES:
        context["note"] = (
            f"The instance is {instance.get_power_state_display().lower()}: its serial output "
            "shows here again once it runs (reload the page then)."
        )
        return HttpResponseStopPolling(render(request, TEMPLATE, context).content)
    backend = backend_named(instance.backend)
    assert isinstance(backend, ReadsSerialOutput)
    try:
        read = backend.serial_output(instance.machine_id, start)
    except BackendError as error:
        context["note"] = error.message
        if error.retryable:
            context["poll"] = _poller(instance, start)
            return render(request, TEMPLATE, context)
        return HttpResponseStopPolling(render(request, TEMPLATE, context).content)
    if read.start > start > 0:
        lost = read.start - start
        context["note"] = f"{lost} bytes were lost in between: the cloud keeps only the latest."
    context.update(text=read.text, poll=_poller(instance, read.next))
    return render(request, TEMPLATE, context)
