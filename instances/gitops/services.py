"""Connecting a project to a repository, and asking for a sync (the button, the webhook)."""

import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from instances.choices import GitAuth, SyncTrigger
from instances.gitops.sync import SYNC_TASK
from instances.models import GitSource, GitWebhookDelivery, Project
from instances.services.audit import audit_record
from instances.services.queueing import send_on_commit

# a stored token or key goes only to the address it was given for
CREDENTIAL_FOR_NEW_URL = (
    "The repository's address changed: give its deploy key or token again (the stored one is "
    "kept only for the address it was given for)."
)


@dataclass(frozen=True)
class SourceRequest:
    """What the owner gives; an empty credential keeps the stored one, for the same address."""

    url: str
    branch: str
    path: str
    auth: str
    credential: str = ""


def git_source_save(
    *, project: Project, actor: AbstractBaseUser, request: SourceRequest
) -> GitSource:
    """Connect the project to the repository, or change its source; the saving owner becomes the
    acting user of its syncs. A first sync is queued."""
    with transaction.atomic():
        source = GitSource.objects.select_for_update().filter(project=project).first()
        created = source is None
        if source is None:
            source = GitSource(project=project)
            source.webhook_secret = secrets.token_urlsafe(32)
        url = request.url.strip()
        if request.auth == GitAuth.NONE:
            source.credential = ""
        elif request.credential:
            source.credential = request.credential
        elif url != source.url or request.auth != source.auth:
            raise ValidationError({"credential": CREDENTIAL_FOR_NEW_URL})
        source.url, source.branch = url, request.branch.strip()
        source.path, source.auth = request.path.strip().strip("/"), request.auth
        source.actor = actor  # type: ignore[assignment]
        source.save()
        audit_record(
            actor=actor,
            action="gitsource.connect" if created else "gitsource.change",
            project=project,
            target=source,
            message=f"Follows {source}.",
        )
        git_sync_request(
            source=source, trigger=SyncTrigger.MANUAL, requested_by=actor.get_username()
        )
    return source


def git_source_delete(*, source: GitSource, actor: AbstractBaseUser) -> None:
    """Stop following the repository; the objects it applied stay as they are."""
    with transaction.atomic():
        audit_record(
            actor=actor,
            action="gitsource.disconnect",
            project=source.project,
            target=source,
            message=f"No longer follows {source}.",
        )
        source.delete()


def git_webhook_secret_rotate(*, source: GitSource, actor: AbstractBaseUser) -> None:
    with transaction.atomic():
        source.webhook_secret = secrets.token_urlsafe(32)
        source.save(update_fields=["webhook_secret_encrypted"])
        audit_record(
            actor=actor,
            action="gitsource.webhook_secret",
            project=source.project,
            target=source,
            message="A new webhook secret; the repository's webhook needs it.",
        )


def git_sync_request(*, source: GitSource, trigger: str, requested_by: str = "") -> None:
    """Queue a sync; if one is running, it runs again once it is done (sync._release)."""
    with transaction.atomic():
        GitSource.objects.filter(pk=source.pk).update(sync_requested_at=timezone.now())
        send_on_commit(
            SYNC_TASK, source.pk, trigger, requested_by, queue=settings.ZOPDAY_CLOUD_QUEUE
        )


def git_webhook_sync_request(*, source: GitSource, keys: list[str]) -> bool:
    """Queue the sync a webhook delivery asks for, once: False (nothing queued) when one of its
    `keys` (webhook.delivery_keys) was seen within ZOPDAY_GITOPS_DELIVERY_DAYS."""
    cutoff = timezone.now() - timedelta(days=settings.ZOPDAY_GITOPS_DELIVERY_DAYS)
    with transaction.atomic():
        GitWebhookDelivery.objects.filter(source=source, received_at__lt=cutoff).delete()
        try:
            with transaction.atomic():
                GitWebhookDelivery.objects.bulk_create(
                    GitWebhookDelivery(source=source, key=key) for key in keys
                )
        except IntegrityError:
            return False
        git_sync_request(source=source, trigger=SyncTrigger.WEBHOOK, requested_by="webhook")
    return True
