"""The vTPM of a machine: an swtpm process serving TPM 2.0 on a unix socket in the run folder.

swtpm must run before QEMU starts (QEMU connects at start). `--terminate` makes it exit when QEMU
closes the connection, including when QEMU is killed; stop() is the backstop. All paths are
absolute: swtpm daemonizes and changes directory, and relative paths then break CMD_INIT.
"""

import shutil
import time

from instances.backends.base import BackendError

from . import process
from .run_folder import RunFolder


class Swtpm:
    """Starts and stops the swtpm of a run folder (its pid file says which process is ours)."""

    def __init__(self, binary: str = "swtpm") -> None:
        self.binary = binary

    def start(self, run: RunFolder) -> None:
        if self.is_running(run):
            return
        if shutil.which(self.binary) is None:
            raise BackendError(f"{self.binary} is not installed (apt-get install swtpm).")
        state = run.tpm_state.resolve()
        state.mkdir(mode=0o700, exist_ok=True)
        run.tpm_socket.unlink(missing_ok=True)
        argv = [
            self.binary,
            "socket",
            "--tpm2",
            "--daemon",
            "--terminate",
            "--tpmstate",
            f"dir={state}",
            "--ctrl",
            f"type=unixio,path={run.tpm_socket.resolve()}",
            "--pid",
            f"file={run.tpm_pidfile.resolve()}",
            "--log",
            f"file={run.tpm_log.resolve()}",
        ]
        process.run_daemon(argv, run.tpm_log, what="swtpm (vTPM)")
        deadline = time.monotonic() + 5
        while not run.tpm_socket.exists():
            if time.monotonic() > deadline:
                raise BackendError("swtpm (vTPM) started but its socket never appeared.")
            time.sleep(0.02)

    def is_running(self, run: RunFolder) -> bool:
        return process.is_alive(process.read_pidfile(run.tpm_pidfile), str(run.tpm_state.resolve()))

    def stop(self, run: RunFolder) -> None:
        pid = process.read_pidfile(run.tpm_pidfile)
        if pid is not None:
            process.kill(pid, str(run.tpm_state.resolve()), grace=2)
        run.tpm_pidfile.unlink(missing_ok=True)
