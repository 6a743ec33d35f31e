"""Processes the backend starts and must find again later: QEMU and swtpm.

Both daemonize (fork, and the parent exits once the child is ready), so they are never children of
the worker: they outlive it, and no zombie of theirs can linger in it. A pid alone is not trusted
(pids are reused): a process counts as ours only when its command line names our run folder.
"""

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Collection
from pathlib import Path

from instances.backends.base import BackendError

from .images import last_line

DAEMON_TIMEOUT = 60.0  # how long a daemon may take to set up before its parent exits


def is_alive(pid: int | None, marker: str) -> bool:
    """A live (not zombie) process whose command line contains marker."""
    if not pid or pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]  # a reused pid may be any program, any bytes
    return state not in ("Z", "X") and os.fsencode(marker) in cmdline.replace(b"\0", b" ")


def find(marker: str) -> list[int]:
    """Every live process whose command line contains marker, found by scanning /proc: also
    those no pid file names yet (a QEMU still daemonizing, launched by a worker that died)."""
    return sorted(
        int(entry.name)
        for entry in os.scandir("/proc")
        if entry.name.isdigit() and is_alive(int(entry.name), marker)
    )


def holders(paths: Collection[Path], marker: str) -> dict[int, Path]:
    """Of the live processes whose command line contains marker, those that have one of paths
    open (as QEMU holds its disks, hot-plugged ones too): pid -> that path."""
    wanted = {os.path.realpath(path) for path in paths}
    held = {}
    for pid in find(marker):
        for target in _open_files(pid):
            if target in wanted:
                held[pid] = Path(target)
                break
    return held


def _open_files(pid: int) -> list[str]:
    targets = []
    try:
        with os.scandir(f"/proc/{pid}/fd") as fds:
            for fd in fds:
                with contextlib.suppress(OSError):  # closed meanwhile
                    targets.append(os.readlink(fd.path))
    except OSError:  # the process is gone
        pass
    return targets


def run_daemon(argv: list[str], log: Path, *, what: str, timeout: float = DAEMON_TIMEOUT) -> None:
    """Run a self-daemonizing command; its output is appended to log, its last line is the error."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as output:
        offset = output.tell()
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as error:
            raise BackendError(f"Could not start {what}: {error.strerror or error}") from error
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired as error:
        process.kill()
        process.wait()
        raise BackendError(f"{what} did not finish starting within {timeout:g} s.") from error
    if code != 0:
        with open(log, "rb") as output:
            output.seek(offset)
            reason = last_line(output.read().decode(errors="replace"))
        for word in argv[:5]:  # "qemu-system-x86_64: Invalid ..." -> "Invalid ..."
            reason = reason.removeprefix(f"{Path(word).name}: ")
        raise BackendError(f"{what} failed to start: {reason or f'exit status {code}'}")


def wait_gone(pid: int, marker: str, timeout: float) -> bool:
    """Wait for the process to exit: on a pidfd (woken the moment it exits), else by polling."""
    if not is_alive(pid, marker):
        return True
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # gone meanwhile, or a kernel without pidfds
        pidfd = None
    if pidfd is not None:
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(pidfd, selectors.EVENT_READ)
                if selector.select(timeout):
                    return True
        finally:
            os.close(pidfd)
        return not is_alive(pid, marker)
    deadline = time.monotonic() + timeout
    while is_alive(pid, marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def kill(pid: int, marker: str, *, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL if the process is still there after grace seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        if not is_alive(pid, marker):
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        if wait_gone(pid, marker, wait):
            return
    raise BackendError(f"Process {pid} does not die, even with SIGKILL.", retryable=True)


def read_pidfile(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
