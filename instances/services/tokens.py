"""API tokens: create one (its plaintext is returned once) and resolve a presented one."""

import hashlib
import secrets
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from instances.disk_full import unless_disk_full
from instances.models import ApiToken
from instances.services.audit import audit_record

TOKEN_PREFIX = "zop_"
PREFIX_LENGTH = 12  # "zop_" and 8 random characters: shown to tell tokens apart
# last_used_at is a hint for people, not a log: one write a minute per token is plenty.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def api_token_hash(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


@transaction.atomic
def api_token_create(
    *, user: User, name: str, expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """Create a token for the user and return it with its plaintext, which is not kept: only its
    SHA-256 hash is stored, so this is the one time anyone sees it."""
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        user=user,
        name=name.strip(),
        prefix=plaintext[:PREFIX_LENGTH],
        token_hash=api_token_hash(plaintext),
        expires_at=expires_at,
    )
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "The expiry must be in the future."})
    token.full_clean()
    token.save()
    audit_record(actor=user, action="api_token.create", target=token)
    return token, plaintext


def api_token_known_prefix(*, plaintext: str) -> str | None:
    """The prefix of the presented token when a stored token has it (right secret or not)."""
    prefix = plaintext[:PREFIX_LENGTH]
    if len(plaintext) <= PREFIX_LENGTH or not prefix.startswith(TOKEN_PREFIX):
        return None
    if not prefix.isascii() or not ApiToken.objects.filter(prefix=prefix).exists():
        return None
    return prefix


def api_token_authenticate(*, plaintext: str) -> User | None:
    """The active user the token belongs to; None for an unknown, expired or inactive one."""
    if not plaintext.startswith(TOKEN_PREFIX) or not plaintext.isascii():
        return None
    token = (
        ApiToken.objects.select_related("user").filter(token_hash=api_token_hash(plaintext)).first()
    )
    if token is None or token.expired or not token.user.is_active:
        return None
    now = timezone.now()
    with unless_disk_full("a token's last use"):
        ApiToken.objects.filter(pk=token.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
        ).update(last_used_at=now)
    return token.user
