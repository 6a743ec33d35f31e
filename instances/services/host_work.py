"""The work a host's workers have in hand, recorded on the host, so that work whose worker died
(kill -9, out of memory) is found within seconds and sent again, rather than left half done.

A task in progress holds an flock on its record, a small JSON file under the run folder (the
task, its arguments, its queue, how often it was sent again): the kernel drops the lock when the
worker dies, so a record whose lock is free is work nobody does any more.
"""

import contextlib
import fcntl
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings


@dataclass(frozen=True)
class Lost:
    """Work whose worker died: what to send again (`resent`: how often it was already)."""

    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    resent: int


def _folder(host: str) -> Path:
    return Path(settings.RUN_DIR) / "host-work" / host


@contextlib.contextmanager
def work_in_hand(lost: Lost, host: str | None = None) -> Iterator[None]:
    """Record the work while it runs. The record appears already locked (made aside, locked,
    then renamed into place), so no reader finds it unlocked while its worker lives."""
    folder = _folder(host or settings.ZOPDAY_HOST)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    name = uuid.uuid4().hex
    aside, path = folder / f".{name}.new", folder / f"{name}.json"
    fd = os.open(aside, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, json.dumps(lost.__dict__).encode())
        os.rename(aside, path)
        yield
    finally:
        aside.unlink(missing_ok=True)
        path.unlink(missing_ok=True)  # before the lock goes: a reader then sees it finished
        os.close(fd)


def lost_work(host: str) -> Iterator[Lost]:
    """The work recorded on this host whose worker died, each yielded while its record is held
    and removed once the caller has dealt with it (sent it again, or given up on it)."""
    folder = _folder(host)
    if not folder.is_dir():
        return
    for aside in folder.glob(".*.new"):  # a worker died making its record, long ago
        with contextlib.suppress(OSError):
            if time.time() - aside.stat().st_mtime > 60:
                aside.unlink()
    for path in sorted(folder.glob("*.json")):
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # finished meanwhile
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # its worker is on it
                continue
            if os.fstat(fd).st_nlink == 0:  # finished between the open and the lock
                continue
            try:
                lost = Lost(**json.loads(path.read_text()))
            except (OSError, ValueError, TypeError):
                path.unlink(missing_ok=True)
                continue
            yield lost
            path.unlink(missing_ok=True)
        finally:
            os.close(fd)
