"""Console tickets: issued by the web app to a user allowed to open a console, claimed once by
the console proxy.

A ticket is `secrets.token_urlsafe(32)` (43 characters of [A-Za-z0-9_-], 256 random bits). Only
its SHA-256 hash is stored, with the user, instance and console kind it is bound to and an
expiry of at most a minute. The browser sends it to the proxy as the websocket subprotocol
`zopday.ticket.<ticket>` (or, for clients that cannot set subprotocols, as the first message),
never in a URL, so it does not end up in logs or browser history.
"""

import hashlib
import re
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from instances import actions
from instances.choices import Role
from instances.consoles.registry import ConsoleKind
from instances.errors import ActionRefused
from instances.models import ConsoleTicket, Instance

SUBPROTOCOL_PREFIX = "zopday.ticket."
TICKET_FORMAT = re.compile(r"[A-Za-z0-9_-]{43}")
# Used and expired tickets are of no use to anyone: issuing a ticket removes those of the past day.
KEEP_USED_TICKETS = timedelta(days=1)


def ticket_hash(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


@transaction.atomic
def console_ticket_issue(
    *, user: User, instance: Instance, role: Role | None, kind: ConsoleKind
) -> tuple[ConsoleTicket, str]:
    """A ticket for `user` to open the `kind` console of `instance`, and its plaintext.

    Refused unless the kind's console rule allows it; read-only unless its interactive rule does.
    """
    allowed = actions.CONSOLE_RULES[kind.rule](instance, role)
    if not allowed:
        raise ActionRefused(allowed.reason)
    read_only = not actions.CONSOLE_RULES[kind.interactive_rule](instance, role)
    plaintext = secrets.token_urlsafe(32)
    now = timezone.now()
    ConsoleTicket.objects.filter(expires_at__lt=now - KEEP_USED_TICKETS).delete()
    ticket = ConsoleTicket.objects.create(
        token_hash=ticket_hash(plaintext),
        user=user,
        instance=instance,
        kind=kind.name,
        read_only=read_only,
        expires_at=now + timedelta(seconds=settings.CONSOLE_TICKET_SECONDS),
    )
    return ticket, plaintext


def console_ticket_claim(
    *, plaintext: str, user_id: int, instance_id: int, kind: str
) -> ConsoleTicket | None:
    """Use up the ticket if unused, unexpired and bound to this user, instance and kind; else None.

    One conditional UPDATE: racing connections cannot both win, and a mismatch leaves it unused.
    """
    if not TICKET_FORMAT.fullmatch(plaintext):
        return None
    token_hash = ticket_hash(plaintext)
    now = timezone.now()
    claimed = ConsoleTicket.objects.filter(
        token_hash=token_hash,
        user_id=user_id,
        instance_id=instance_id,
        kind=kind,
        claimed_at__isnull=True,
        expires_at__gt=now,
    ).update(claimed_at=now)
    if claimed != 1:
        return None
    return ConsoleTicket.objects.select_related("user", "instance__project").get(
        token_hash=token_hash
    )


def ticket_from_subprotocols(offered: list[str] | tuple[str, ...]) -> str | None:
    for protocol in offered:
        if protocol.startswith(SUBPROTOCOL_PREFIX):
            return protocol[len(SUBPROTOCOL_PREFIX) :]
    return None
