"""Browser consoles: the console pages, their tickets, the serial log and session recordings."""

from pathlib import Path

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from instances import actions
from instances.access import instance_for_user
from instances.backends import backend_available, backend_named
from instances.consoles.recording import finish_recording, part_path
from instances.consoles.registry import CONSOLE_KINDS, ConsoleKind, console_kind
from instances.consoles.tickets import SUBPROTOCOL_PREFIX, console_ticket_issue
from instances.consoles.virtual_keys import HELD_KEYS, KEY_COMBOS, SINGLE_KEYS
from instances.errors import ActionRefused
from instances.http import AuthedRequest
from instances.models import ConsoleSession, Instance

RECORDINGS_PAGE_SIZE = 50
# xterm.js sizes and colours the terminal through <style> elements it writes (it takes no
# nonce): the terminal pages allow inline styles; scripts stay the console's own files only.
XTERM_POLICY = {"style-src": ["'unsafe-inline'"]}


def _kind_or_404(name: str) -> ConsoleKind:
    kind = console_kind(name)
    if kind is None:
        raise Http404("No such console.")
    return kind


def console_links(instance: Instance, allowed: dict[str, actions.Allowed]) -> list[dict]:
    """The Options menu of the details page: one entry per console kind."""
    return [
        {
            "kind": kind.name,
            "label": f"{kind.label} console",
            "title": kind.description,
            "url": reverse(
                "instance-console", args=[instance.project.slug, instance.pk, kind.name]
            ),
            "allowed": allowed[kind.rule],
        }
        for kind in CONSOLE_KINDS.values()
    ]


def exec_channel_of(instance: Instance) -> str:
    """The cloud channel an exec console goes through ("SSM"), or "" for this console's own."""
    if not backend_available(instance.backend):
        return ""
    return backend_named(instance.backend).exec_channel


@require_GET
@login_required
def console_page(request: AuthedRequest, project_slug: str, pk: int, kind: str) -> HttpResponse:
    instance, role = instance_for_user(request.user, project_slug, pk)
    console = _kind_or_404(kind)
    allowed = actions.instance_console_actions(instance, role)
    base = reverse("instance-console", args=[project_slug, pk, console.name])
    context = {
        "project": instance.project,
        "instance": instance,
        "console": console,
        "allowed": allowed,
        "can_open": allowed[console.rule],
        "interactive": bool(allowed[console.interactive_rule]),
        "ticket_url": base + "ticket/",
        "channel": exec_channel_of(instance) if console.name == "exec" else "",
        "consoles": console_links(instance, allowed),
        "held_keys": HELD_KEYS,
        "single_keys": SINGLE_KEYS,
        "key_combos": KEY_COMBOS,
    }
    template = "instances/console.html" if console.is_terminal else "instances/console_vnc.html"
    response = render(request, template, context)
    policy = {"connect-src": [proxy_base_url(request)]}
    if console.is_terminal:
        policy.update(XTERM_POLICY)
    response._csp_update = policy  # type: ignore[attr-defined]
    return response


@never_cache
@require_POST
@login_required
def console_ticket(request: AuthedRequest, project_slug: str, pk: int, kind: str) -> JsonResponse:
    """A fresh single-use ticket for the console page's websocket (JSON)."""
    instance, role = instance_for_user(request.user, project_slug, pk)
    console = _kind_or_404(kind)
    try:
        ticket, plaintext = console_ticket_issue(
            user=request.user, instance=instance, role=role, kind=console
        )
    except ActionRefused as refused:
        return JsonResponse({"detail": refused.message}, status=409)
    return JsonResponse(
        {
            "url": f"{proxy_base_url(request)}/consoles/{instance.pk}/{console.name}",
            "subprotocol": SUBPROTOCOL_PREFIX + plaintext,
            "read_only": ticket.read_only,
            "expires_in": settings.CONSOLE_TICKET_SECONDS,
        }
    )


def proxy_base_url(request: AuthedRequest) -> str:
    """Where the browser reaches the console proxy: CONSOLEPROXY_URL, or the page's host name
    on the proxy's port."""
    if settings.CONSOLEPROXY_URL:
        return str(settings.CONSOLEPROXY_URL).rstrip("/")
    host = request.get_host()
    name = host[: host.index("]") + 1] if host.startswith("[") else host.split(":")[0]
    scheme = "wss" if request.is_secure() else "ws"
    return f"{scheme}://{name}:{settings.CONSOLEPROXY_PORT}"


@require_GET
@login_required
def serial_log_download(request: AuthedRequest, project_slug: str, pk: int) -> FileResponse:
    """Everything the guest printed on its serial port, across power cycles."""
    from instances.backends import backend_named

    instance, role = instance_for_user(request.user, project_slug, pk)
    if not (allowed := actions.serial_log(instance, role)):
        raise PermissionDenied(allowed.reason)
    path = backend_named(instance.backend).serial_log(instance.machine_id)
    if path is None or not path.is_file():
        raise Http404("This instance has no serial output yet.")
    return FileResponse(
        open(path, "rb"),
        as_attachment=True,
        filename=f"{instance.name}-serial.log",
        content_type="text/plain; charset=utf-8",
    )


def _recordings_access(request: AuthedRequest, project_slug: str, pk: int) -> Instance:
    instance, role = instance_for_user(request.user, project_slug, pk)
    if not (allowed := actions.console_recordings(instance, role)):
        raise PermissionDenied(allowed.reason)
    return instance


@require_GET
@login_required
def console_sessions(request: AuthedRequest, project_slug: str, pk: int) -> HttpResponse:
    """The console sessions of an instance (who, what, when, how much), with their recordings."""
    instance = _recordings_access(request, project_slug, pk)
    page = Paginator(
        ConsoleSession.objects.filter(instance=instance), RECORDINGS_PAGE_SIZE
    ).get_page(request.GET.get("page"))
    return render(
        request,
        "instances/console_sessions.html",
        {"project": instance.project, "instance": instance, "page": page},
    )


def _recording(instance: Instance, session_id: int) -> tuple[ConsoleSession, Path]:
    session = get_object_or_404(ConsoleSession, pk=session_id, instance=instance)
    root = (settings.RUN_DIR / "recordings").resolve()
    path = (settings.RUN_DIR / session.recording).resolve() if session.recording else None
    if path is None or not path.is_relative_to(root):
        raise Http404("This session has no recording.")
    if session.ended_at is None:  # the proxy writes it when the session ends
        raise Http404("This session is still open: its recording is ready when it ends.")
    if not path.exists() and part_path(path).exists():
        finish_recording(path)  # left unfinished by a proxy that stopped mid-session
    if path is None or not path.is_file():
        raise Http404("This session has no recording.")
    return session, path


@require_GET
@login_required
def console_recording(
    request: AuthedRequest, project_slug: str, pk: int, session_id: int
) -> FileResponse:
    """The asciicast v2 file of a session (inline for the replay page, else a download)."""
    instance = _recordings_access(request, project_slug, pk)
    session, path = _recording(instance, session_id)
    return FileResponse(
        open(path, "rb"),
        as_attachment="inline" not in request.GET,
        filename=f"{session.instance_name}-{session.kind}-{session.pk}.cast",
        content_type="application/x-asciicast",
    )


@require_GET
@login_required
def console_replay(
    request: AuthedRequest, project_slug: str, pk: int, session_id: int
) -> HttpResponse:
    instance = _recordings_access(request, project_slug, pk)
    session, _ = _recording(instance, session_id)
    recording_url = reverse("instance-console-recording", args=[project_slug, pk, session.pk])
    response = render(
        request,
        "instances/console_replay.html",
        {
            "project": instance.project,
            "instance": instance,
            "session": session,
            "recording_url": recording_url + "?inline=1",
            "download_url": recording_url,
        },
    )
    response._csp_update = XTERM_POLICY  # type: ignore[attr-defined]
    return response
