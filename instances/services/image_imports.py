"""Imports of images from a URL: start one (its fields checked, the address probed so a wrong one
is refused at once), cancel, retry or dismiss it. The download runs in a worker
(services.image_import_work) under the same checks as uploads (services.images)."""

import dataclasses
import re

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from instances import actions, url_fetch
from instances.access import project_role
from instances.choices import (
    IMPORT_TERMINAL,
    IMPORT_TRANSITIONAL,
    ImportFormat,
    ImportStatus,
    OsType,
)
from instances.errors import ActionRefused
from instances.models import ImageImport, Project
from instances.services.audit import audit_record
from instances.services.images import image_field_refusals, image_size_refusal
from instances.services.import_slots import image_imports_dispatch

SHA256 = re.compile(r"[0-9a-f]{64}")
PROBE_STALL_SECONDS = 10


def image_import_start(
    *,
    project: Project,
    actor: AbstractBaseUser,
    name: str,
    format: str,
    url: str,
    sha256: str = "",
    os_type: str = OsType.LINUX,
    description: str = "",
) -> ImageImport:
    """Check the fields, probe the address (its answer and announced size), then queue the
    download; ValidationError at the field to fix."""
    actions.require(actions.manage(project_role(actor, project)))
    name, url, sha256 = name.strip(), url.strip(), _checksum(sha256)
    errors = image_field_refusals(project, name, os_type, description)
    if "name" not in errors and _importing(project, name):
        errors["name"] = f"An import called {name} is under way already: choose another name."
    if format not in ImportFormat.values:
        errors["format"] = "Choose qcow2, raw or ISO."
    if sha256 and not SHA256.fullmatch(sha256):
        errors["sha256"] = "Give the SHA-256 as 64 hexadecimal digits, or leave it empty."
    if message := url_fetch.url_refusal(url):
        errors["url"] = message
    if errors:
        raise ValidationError(errors)
    _probe(project, url)
    with transaction.atomic():
        image_import = ImageImport.objects.create(
            project=project, created_by_id=actor.pk, name=name, format=format, url=url,
            sha256=sha256, os_type=os_type, description=description.strip(),
        )  # fmt: skip
        audit_record(actor=actor, action="image.import", project=project, target=image_import)
        _queue(image_import)
    return image_import


def image_import_cancel(*, image_import: ImageImport, actor: AbstractBaseUser) -> None:
    """Stop an import: one not started yet ends at once, a download stops at its next chunk."""
    actions.require(actions.manage(project_role(actor, image_import.project)))
    mine = ImageImport.objects.filter(pk=image_import.pk)
    with transaction.atomic():
        stopped = mine.filter(status=ImportStatus.QUEUED).update(
            status=ImportStatus.CANCELLED, finished_at=timezone.now(), message="Cancelled."
        ) or mine.filter(status=ImportStatus.RUNNING).update(status=ImportStatus.CANCELLING)
        if not stopped:
            raise ActionRefused(f"The import of {image_import.name} is not running any more.")
        audit_record(
            actor=actor, action="image.import.cancel", project=image_import.project,
            target=image_import,
        )  # fmt: skip
        image_imports_dispatch(image_import.project_id)  # a queued one freed its slot
    image_import.refresh_from_db()


def image_import_retry(*, image_import: ImageImport, actor: AbstractBaseUser) -> None:
    """Download a failed or cancelled import again, from the start."""
    project = image_import.project
    actions.require(actions.manage(project_role(actor, project)))
    if image_import.status not in (ImportStatus.FAILED, ImportStatus.CANCELLED):
        raise ActionRefused(f"The import of {image_import.name} cannot be retried now.")
    errors = image_field_refusals(
        project, image_import.name, image_import.os_type, image_import.description
    )
    if "name" in errors or _importing(project, image_import.name):
        raise ActionRefused(
            f"An image or import called {image_import.name} exists now: import it again "
            "under another name."
        )
    with transaction.atomic():
        retried = ImageImport.objects.filter(
            pk=image_import.pk, status__in=(ImportStatus.FAILED, ImportStatus.CANCELLED)
        ).update(
            status=ImportStatus.QUEUED, attempt=F("attempt") + 1, bytes_done=0, rate=0,
            bytes_total=None, message="", error_field="", heartbeat_at=None, finished_at=None,
            sent_at=None, bytes_reserved=0,
        )  # fmt: skip
        if not retried:
            raise ActionRefused(f"The import of {image_import.name} cannot be retried now.")
        image_import.refresh_from_db()
        audit_record(actor=actor, action="image.import.retry", project=project, target=image_import)
        _queue(image_import)


def image_import_dismiss(*, image_import: ImageImport, actor: AbstractBaseUser) -> None:
    """Forget a finished import's record (its image, if any, stays)."""
    project = image_import.project
    actions.require(actions.manage(project_role(actor, project)))
    with transaction.atomic():
        audit_record(
            actor=actor, action="image.import.dismiss", project=project, target=image_import
        )
        finished = ImageImport.objects.filter(pk=image_import.pk, status__in=IMPORT_TERMINAL)
        if not finished.delete()[0]:
            raise ActionRefused(f"The import of {image_import.name} is still running: cancel it.")


def _checksum(value: str) -> str:
    value = value.strip().lower()
    return value.removeprefix("sha256:")


def _importing(project: Project, name: str) -> bool:
    return ImageImport.objects.filter(
        project=project, name=name, status__in=IMPORT_TRANSITIONAL
    ).exists()


def _probe(project: Project, url: str) -> None:
    """Ask the address once, reading no body: an unknown host, an error answer, a redirect loop
    or a size over the cap or the quota is refused at the URL field now."""
    within = url_fetch.limits()  # the request waits on it: a stall ends it sooner
    within = dataclasses.replace(within, stall=min(within.stall, PROBE_STALL_SECONDS))
    try:
        with url_fetch.url_opened(url, within) as response:
            size = url_fetch.content_length(response)
    except url_fetch.FetchError as error:
        raise ValidationError({"url": error.message}) from None
    if size is not None and (message := image_size_refusal(project, size)):
        raise ValidationError({"url": message})


def _queue(image_import: ImageImport) -> None:
    """To this host's import workers, if the project has a free slot; else it waits its turn."""
    image_imports_dispatch(image_import.project_id)
