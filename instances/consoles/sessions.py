"""Admitting a websocket to a console, and the audit record of the session it opens.

These are plain synchronous functions on the ORM; the proxy calls them through
`sync_to_async`, so database work never blocks its event loop.
"""

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import close_old_connections
from django.db.models import Q
from django.utils import timezone

from instances import actions
from instances.access import project_role
from instances.consoles.proxies import proxy_gone, this_proxy
from instances.consoles.registry import ConsoleKind
from instances.consoles.tickets import TICKET_FORMAT, console_ticket_claim
from instances.models import ConsoleSession
from instances.services.audit import audit_record


@dataclass(frozen=True)
class Admission:
    """What the proxy needs to run an admitted session."""

    session_id: int
    username: str
    instance_id: int
    machine_id: str
    backend: str
    kind: ConsoleKind
    read_only: bool
    recording: Path | None  # absolute path of the asciicast file to write, if recorded


class Refused(Exception):
    """The websocket may not open this console; the message is shown to the user."""


NOT_LOGGED_IN = "You are not logged in (or your session ended): log in and reopen."
NOT_VALID = "This console ticket is not valid (expired, used or not yours)."


class _SessionRequest:
    """Just enough of an HttpRequest for django.contrib.auth.get_user()."""

    def __init__(self, session_key: str) -> None:
        engine = import_module(settings.SESSION_ENGINE)
        self.session = engine.SessionStore(session_key)


def user_for_session(session_key: str | None) -> AbstractBaseUser | AnonymousUser:
    """The user logged in with this Django session cookie (anonymous if none or stale)."""
    if not session_key:
        return AnonymousUser()
    return get_user(_SessionRequest(session_key))  # type: ignore[arg-type]


def console_admit_precheck(*, ticket: str, session_key: str | None) -> None:
    """Refuse, without the database, what no ticket or session could admit: a flood of junk
    connections costs the proxy's one database thread nothing."""
    if not session_key:
        raise Refused(NOT_LOGGED_IN)
    if not TICKET_FORMAT.fullmatch(ticket):
        raise Refused(NOT_VALID)


def console_admit(
    *, ticket: str, session_key: str | None, instance_id: int, kind: ConsoleKind
) -> Admission:
    """Admit a websocket: claim its ticket for the session cookie's user, check the role again (it
    may have changed since the ticket was issued), and open the session's audit record.
    """
    console_admit_precheck(ticket=ticket, session_key=session_key)
    close_old_connections()
    user = user_for_session(session_key)
    if not user.is_authenticated:
        raise Refused(NOT_LOGGED_IN)
    claimed = console_ticket_claim(
        plaintext=ticket, user_id=user.pk, instance_id=instance_id, kind=kind.name
    )
    if claimed is None:
        raise Refused(NOT_VALID)
    instance = claimed.instance
    role = project_role(user, instance.project)
    allowed = actions.CONSOLE_RULES[kind.rule](instance, role)
    if not allowed:
        raise Refused(allowed.reason)
    read_only = claimed.read_only or not actions.CONSOLE_RULES[kind.interactive_rule](
        instance, role
    )
    session = ConsoleSession.objects.create(
        project=instance.project,
        instance=instance,
        instance_name=instance.name,
        user_id=user.pk,
        username=user.get_username(),
        kind=kind.name,
        read_only=read_only,
        proxy=this_proxy(),
    )
    recording = None
    if kind.recorded:
        relative = Path("recordings") / f"{session.started_at:%Y-%m}" / f"session-{session.pk}.cast"
        session.recording = str(relative)
        session.save(update_fields=["recording"])
        recording = settings.RUN_DIR / relative
    audit_record(
        actor=user,
        action=f"console.{kind.name}",
        project=instance.project,
        target=instance,
        message="Opened the console read-only." if read_only else "Opened the console.",
        detail={"session": session.pk, "read_only": read_only},
    )
    return Admission(
        session_id=session.pk,
        username=user.get_username(),
        instance_id=instance.pk,
        machine_id=instance.machine_id,
        backend=instance.backend,
        kind=kind,
        read_only=read_only,
        recording=recording,
    )


@dataclass
class Tally:
    """A live session's bytes so far, each way: `read` is set by the bridge that counts them."""

    read: Callable[[], tuple[int, int]] = lambda: (0, 0)


def console_session_count(*, session_id: int, bytes_to_guest: int, bytes_from_guest: int) -> None:
    """The bytes of a session still open, written as it goes: a proxy killed mid-session leaves
    its record saying how much flowed (the next proxy closes it as orphaned)."""
    ConsoleSession.objects.filter(pk=session_id, ended_at=None).update(
        bytes_to_guest=bytes_to_guest, bytes_from_guest=bytes_from_guest
    )


def console_session_end(
    *, session_id: int, bytes_to_guest: int, bytes_from_guest: int, reason: str
) -> None:
    ConsoleSession.objects.filter(pk=session_id).update(
        ended_at=timezone.now(),
        bytes_to_guest=bytes_to_guest,
        bytes_from_guest=bytes_from_guest,
        close_reason=reason[:200],
    )


ORPHANED = "The console proxy stopped before the session ended."


def console_sessions_close_orphaned(*, host: str) -> int:
    """Close the sessions a console proxy of this host left open when it was killed (or the
    machine went down): those of proxies no longer running, not those of another proxy beside
    this one. Sessions of deleted instances whose proxy is gone go too. How many were closed."""
    open_sessions = ConsoleSession.objects.filter(ended_at=None).filter(
        Q(instance__host=host) | Q(instance=None)
    )
    proxies = set(open_sessions.values_list("proxy", flat=True))
    running = [proxy for proxy in proxies if not proxy_gone(proxy)]
    return open_sessions.exclude(proxy__in=running).update(
        ended_at=timezone.now(), close_reason=ORPHANED
    )
