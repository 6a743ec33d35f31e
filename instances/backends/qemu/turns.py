"""Taking turns on a QMP monitor's socket.

QEMU serves one client per monitor and drops any other that connects meanwhile (the guest agent's
channel, by contrast, keeps a second client waiting), so a reconciler's status read landing in a
power task's exchange would fail one of them. Callers, threads and processes alike, take turns on
a lock file beside the socket.
"""

import contextlib
import fcntl
import time
from collections.abc import Iterator
from pathlib import Path

from instances.backends.base import BackendError

POLL_SECONDS = 0.002


@contextlib.contextmanager
def socket_turn(socket_path: Path, *, timeout: float, what: str) -> Iterator[None]:
    """Hold the socket's turn; a BackendError (retryable) when it stays busy past timeout."""
    try:
        handle = open(socket_path.with_suffix(".lock"), "a")  # noqa: SIM115
    except OSError as error:
        raise BackendError(
            f"{what} is not available ({error.strerror or error}).", retryable=True
        ) from error
    with handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise BackendError(
                        f"{what} stayed busy for {timeout:g} s.", retryable=True
                    ) from None
                time.sleep(POLL_SECONDS)
        yield  # closing the file releases the lock
