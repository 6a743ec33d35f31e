"""A full disk under the database or the run folder: reads, logins and deletions go on, what
is only a hint (last login, a token's last use) is skipped, and a write is refused with a 503
that says what to do, never a 500."""

import errno
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.contrib.auth.models import update_last_login
from django.db import DatabaseError, transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

log = logging.getLogger(__name__)
T = TypeVar("T")

DISK_FULL_MESSAGE = (
    "The console's disk is full, so nothing can be saved now. Free space on the host (delete "
    "images, disks or snapshots you no longer need), then try again."
)
DISK_FULL_TEXTS = ("database or disk is full", "no space left on device", "could not extend file")
# Room kept in the run folder for deletions (on a full disk even deleting a row needs some):
# 16 MiB, or a sixteenth of a smaller filesystem.
RESERVE_BYTES = 16 * 2**20
RESERVE_CHECK_SECONDS = 60.0
FULL_TOLD_SECONDS = 60.0
full_told_at = [float("-inf")]


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
        disk_full_told(f"{what} was not saved")


def disk_full_told(what: str) -> None:
    """What a full disk stopped, in one WARNING a minute at most (to stderr: the terminal and
    the journal get it though no log file can be written), else at INFO."""
    if time.monotonic() - full_told_at[0] < FULL_TOLD_SECONDS:
        log.info("%s: the disk is full", what)
        return
    full_told_at[0] = time.monotonic()
    log.warning("The disk is full (%s). Free space on the host: nothing is saved meanwhile.", what)


def last_login_update(sender: Any, user: Any, **kwargs: object) -> None:
    """Django's update_last_login, left out while the disk is full."""
    with unless_disk_full("the last login time"):
        update_last_login(sender, user, **kwargs)


def reserve_path() -> Path:
    return Path(settings.RUN_DIR) / "disk-full-reserve"


def reserve_keep() -> None:
    """Set the reserve aside while the run folder has plenty of room (again, once freed)."""
    path = reserve_path()
    if path.exists():
        return
    try:
        stats = os.statvfs(path.parent)
        size = min(RESERVE_BYTES, stats.f_blocks * stats.f_frsize // 16)
        if stats.f_bavail * stats.f_frsize < 4 * size:
            return
        with path.open("wb") as reserve:
            os.posix_fallocate(reserve.fileno(), 0, size)
    except OSError as error:
        log.warning("could not set aside room for deletions in %s: %s", path.parent, error)
        path.unlink(missing_ok=True)


def freeing_space(work: Callable[[], T]) -> T:
    """Run a deletion; if the disk is too full even for that, give up the reserve and try once
    more, so that the console can free space itself."""
    try:
        return work()
    except DatabaseError as error:
        if not is_disk_full(error) or not reserve_path().exists():
            raise
    reserve_path().unlink(missing_ok=True)
    disk_full_told("its reserve was given up so that a deletion can free space")
    return work()


class DiskFullMiddleware:
    """A view that failed on a full disk answers 503 with the message instead of a 500; now and
    then, the reserve for deletions is set aside again."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.reserve_checked = 0.0

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if time.monotonic() - self.reserve_checked > RESERVE_CHECK_SECONDS:
            self.reserve_checked = time.monotonic()
            reserve_keep()
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_disk_full(exception):
            return None
        disk_full_told(f"{request.method} {request.path} refused")
        context = {"message": DISK_FULL_MESSAGE}
        return render(request, "503.html", context, status=503)
