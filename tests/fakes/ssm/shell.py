"""The agent's shell: bash in a pseudo-terminal, as the unprivileged user `nobody`, in a folder
of its own with an empty environment (the tests run as root; nothing of this machine is theirs)."""

import asyncio
import contextlib
import fcntl
import os
import pty
import signal
import struct
import subprocess
import termios
from collections.abc import Callable
from pathlib import Path

NOBODY = 65534
ARGV = [
    "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
    "setsid", "--ctty", "bash", "--norc", "--noprofile", "-i",
]  # fmt: skip


class Shell:
    """One session's shell; its output goes to `on_output`, its end to `on_exit`."""

    def __init__(
        self,
        folder: Path,
        on_output: Callable[[bytes], None],
        on_exit: Callable[[], None],
        size: tuple[int, int] = (80, 24),
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o777)
        self.master, replica = pty.openpty()
        self.resize(*size)
        env = {"HOME": str(folder), "TERM": "xterm-256color", "PS1": "$ ", "PATH": "/usr/bin:/bin"}
        self.process = subprocess.Popen(
            ARGV, stdin=replica, stdout=replica, stderr=replica, cwd=folder, env=env,
            close_fds=True,
        )  # fmt: skip
        os.close(replica)
        self.on_output, self.on_exit = on_output, on_exit
        self.loop = asyncio.get_running_loop()
        self.loop.add_reader(self.master, self._readable)
        self.ended = False

    def _readable(self) -> None:
        try:
            data = os.read(self.master, 65536)
        except OSError:
            data = b""
        if data:
            self.on_output(data)
        else:
            self._end()

    def write(self, data: bytes) -> None:
        if not self.ended:
            os.write(self.master, data)

    def resize(self, cols: int, rows: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def _end(self) -> None:
        if self.ended:
            return
        self.ended = True
        self.loop.remove_reader(self.master)
        self.on_exit()

    def kill(self) -> None:
        """End the shell and everything it started."""
        with contextlib.suppress(ProcessLookupError):  # its group, once setsid made it
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.kill()  # and itself, if it had not got that far yet
        self.process.wait(5)
        if not self.ended:
            self.ended = True
            self.loop.remove_reader(self.master)
        os.close(self.master)
