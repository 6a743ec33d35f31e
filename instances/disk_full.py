"""A full disk under the database or the run folder: reads, logins and deletions go on, what
is only a hint (last login, a token's last use) is skipped, and a write is refused with a 503
that says what to do, never a 500."""

import errno
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.contrib.auth.models import update_last_login
from django.db import DatabaseError, transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

log = logging.getLogger(__name__)

DISK_FULL_MESSAGE = (
    "The console's disk is full, so nothing can be saved now. Free space on the host (delete "
    "images, disks or snapshots you no longer need), then try again."
)
DISK_FULL_TEXTS = ("database or disk is full", "no space left on device", "could not extend file")


def is_disk_full(error: BaseException | None) -> bool:
    """SQLite's SQLITE_FULL, PostgreSQL's disk_full (53100) or ENOSPC, here or in its cause."""
    seen = 0
    while error is not None and seen < 5:
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return True
        if getattr(error, "sqlstate", None) == "53100":
            return True
        if isinstance(error, DatabaseError) and any(
            text in str(error).lower() for text in DISK_FULL_TEXTS
        ):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


@contextmanager
def unless_disk_full(what: str) -> Iterator[None]:
    """A write that may be left out while the disk is full, in a savepoint of its own so the
    request's transaction survives it."""
    try:
        with transaction.atomic():
            yield
    except DatabaseError as error:
        if not is_disk_full(error):
            raise
        log.warning("%s was not saved: the disk is full", what)


def last_login_update(sender: Any, user: Any, **kwargs: object) -> None:
    """Django's update_last_login, left out while the disk is full."""
    with unless_disk_full("the last login time"):
        update_last_login(sender, user, **kwargs)


class DiskFullMiddleware:
    """A view that failed on a full disk answers 503 with the message instead of a 500."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_disk_full(exception):
            return None
        log.warning("%s %s refused: the disk is full", request.method, request.path)
        context = {"message": DISK_FULL_MESSAGE}
        return render(request, "503.html", context, status=503)
