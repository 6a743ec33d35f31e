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
import threading
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


class Record:
    """A record in hand; keep_for_retry() leaves it held past the run, until the retry runs."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path, self.kept = fd, path, False

    def keep_for_retry(self, task_id: str) -> None:
        """A retry of this work waits in this worker (a countdown): the record stays locked
        until the retry runs (release_retry), so if the worker dies meanwhile it is lost work
        and sent again, not forgotten with the worker's memory."""
        self.kept = True
        with _awaiting_lock:
            _awaiting_retry[task_id] = (self.fd, self.path)

    def end(self) -> None:
        self.path.unlink(missing_ok=True)  # before the lock goes: a reader then sees it finished
        os.close(self.fd)


# task id -> the record of its earlier run, held while its retry waits (in this process)
_awaiting_retry: dict[str, tuple[int, Path]] = {}
_awaiting_lock = threading.Lock()


def release_retry(task_id: str) -> None:
    """The retry of `task_id` runs now (and has its own record): the earlier one goes."""
    with _awaiting_lock:
        held = _awaiting_retry.pop(task_id, None)
    if held is not None:
        Record(*held).end()


@contextlib.contextmanager
def work_in_hand(lost: Lost, host: str | None = None) -> Iterator[Record]:
    """Record the work while it runs. The record appears already locked (made aside, locked,
    then renamed into place), so no reader finds it unlocked while its worker lives."""
    folder = _folder(host or settings.ZOPDAY_HOST)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    name = uuid.uuid4().hex
    aside, path = folder / f".{name}.new", folder / f"{name}.json"
    record = Record(os.open(aside, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600), path)
    try:
        fcntl.flock(record.fd, fcntl.LOCK_EX)
        os.write(record.fd, json.dumps(lost.__dict__).encode())
        os.rename(aside, path)
        yield record
    finally:
        aside.unlink(missing_ok=True)
        if not record.kept:
            record.end()


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
