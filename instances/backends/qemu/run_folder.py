"""The run folder of one machine: where its files and sockets live, and its small state files.

The state files are what lets a fresh backend object (a restarted worker) tell how a machine ended:
`pid` is written at each start and kept after the process is gone, `stop-requested` is written by
shutdown and force stop before they act, and `exit` records the exit kind once it is known.
`launch.json` holds the runtime of a launch under way, for a worker that finds its QEMU after the
launching worker died (QEMU's own pid file names it then, `pid` not yet).
"""

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from instances.backends.base import ExitKind

SERIAL_LOG_LIMIT = 16 * 1024 * 1024  # past this, a start begins a new serial.log


def disk_store(root: Path) -> Path:
    return root / "disks"


@dataclass(frozen=True)
class RunFolder:
    """Paths of one machine's files, and the state files read and written through it."""

    path: Path

    # sockets (unix socket paths must stay under 108 bytes: keep the root short)
    @property
    def qmp_socket(self) -> Path:
        return self.path / "qmp.sock"

    @property
    def watch_socket(self) -> Path:
        """A second QMP monitor, held by whoever waits for the guest to power off."""
        return self.path / "watch.sock"

    @property
    def serial_socket(self) -> Path:
        return self.path / "serial.sock"

    @property
    def vnc_socket(self) -> Path:
        return self.path / "vnc.sock"

    @property
    def agent_socket(self) -> Path:
        return self.path / "qga.sock"

    @property
    def exec_socket(self) -> Path:
        return self.path / "exec.sock"

    @property
    def tpm_socket(self) -> Path:
        return self.path / "swtpm.sock"

    # files
    @property
    def serial_log(self) -> Path:
        return self.path / "serial.log"

    @property
    def qemu_log(self) -> Path:
        return self.path / "qemu.log"

    @property
    def qemu_pidfile(self) -> Path:
        """Written by QEMU itself, and removed by it when it exits cleanly."""
        return self.path / "qemu.pid"

    @property
    def seed_iso(self) -> Path:
        return self.path / "seed.iso"

    @property
    def efi_vars(self) -> Path:
        return self.path / "OVMF_VARS.fd"

    @property
    def efi_vars_template(self) -> Path:
        """Names the template the vars were copied from, so a firmware change recopies them."""
        return self.path / "OVMF_VARS.template"

    @property
    def tpm_state(self) -> Path:
        return self.path / "swtpm"

    @property
    def tpm_pidfile(self) -> Path:
        return self.path / "swtpm.pid"

    @property
    def tpm_log(self) -> Path:
        return self.path / "swtpm.log"

    def disk_path(self, disk_name: str) -> Path:
        """Disks live beside the machine folders, not in them: a detached disk outlives its
        machine and can be attached to another one."""
        return disk_store(self.path.parent) / f"{disk_name}.qcow2"

    def note_container_disk(self, disk_name: str) -> None:
        """Remember a container disk's overlay, so the end of the run throws it away."""
        with self._container_disks_file.open("a") as file:
            file.write(f"{disk_name}\n")

    def drop_container_disks(self) -> None:
        """Delete the overlays of the run's container disks: their writes end with the run."""
        if not self._container_disks_file.exists():
            return
        for name in set(self._container_disks_file.read_text().split()):
            self.disk_path(name).unlink(missing_ok=True)
        self._container_disks_file.unlink(missing_ok=True)

    # state files
    @property
    def _container_disks_file(self) -> Path:
        return self.path / "container-disks"

    @property
    def _pid_file(self) -> Path:
        return self.path / "pid"

    @property
    def _stop_requested_file(self) -> Path:
        return self.path / "stop-requested"

    @property
    def _exit_file(self) -> Path:
        return self.path / "exit"

    @property
    def _boot_scan_file(self) -> Path:
        return self.path / "boot-scan.json"

    @property
    def _runtime_file(self) -> Path:
        return self.path / "runtime.json"

    @property
    def _launch_file(self) -> Path:
        return self.path / "launch.json"

    def exists(self) -> bool:
        return self.path.is_dir()

    def create(self) -> None:
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)

    @contextlib.contextmanager
    def lock(self, name: str = "lock") -> Iterator[None]:
        """Serialise start/stop/undefine of one machine across threads and processes ("lock"),
        or, with another name, some other piece of work on it."""
        self.create()
        with open(self.path / name, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def read_pid(self) -> int | None:
        try:
            return int(self._pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def was_launched(self) -> bool:
        return self._pid_file.exists()

    def begin_start(self, pid: int, runtime: "Runtime") -> None:
        """Record a fresh launch: forget how the previous run ended, in an order safe for lock-free
        reads. The old exit outlives the old pid, lest a reader end that run and free the new run's
        same-named taps, and the old stop request, lest a new run that dies at once read as stopped.
        """
        self.write_runtime(runtime)
        self._boot_scan_file.unlink(missing_ok=True)  # the last run's, even from the same offset
        _write_atomic(self._pid_file, f"{pid}\n")
        self._stop_requested_file.unlink(missing_ok=True)
        self._exit_file.unlink(missing_ok=True)
        self._launch_file.unlink(missing_ok=True)

    def write_launch(self, runtime: "Runtime") -> None:
        """Before QEMU is launched: the runtime of the run to come, so that whoever finds that
        QEMU after its launcher died (by the pid file QEMU writes) can take the run over."""
        _write_atomic(self._launch_file, json.dumps(_runtime_data(runtime)))

    def read_launch(self) -> "Runtime | None":
        return _read_runtime(self._launch_file)

    def clear_launch(self) -> None:
        self._launch_file.unlink(missing_ok=True)

    def mark_stop_requested(self) -> None:
        _write_atomic(self._stop_requested_file, "")

    def clear_stop_requested(self) -> None:
        self._stop_requested_file.unlink(missing_ok=True)

    def stop_requested(self) -> bool:
        return self._stop_requested_file.exists()

    def read_exit(self) -> ExitKind | None:
        try:
            return ExitKind(self._exit_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def write_exit(self, kind: ExitKind) -> None:
        _write_atomic(self._exit_file, f"{kind.value}\n")

    def note_reboot(self, request: str, pid: int, boots: int) -> None:
        """A reboot is being sent for `request` (a Restart's claim) to the QEMU `pid`, whose
        guest had booted `boots` times: a delivery of the same request again can tell."""
        data = {"request": request, "pid": pid, "boots": boots}
        _write_atomic(self._reboot_file, json.dumps(data))

    def read_reboot(self) -> dict[str, object]:
        try:
            return dict(json.loads(self._reboot_file.read_text()))
        except (OSError, ValueError):
            return {}

    @property
    def _reboot_file(self) -> Path:
        return self.path / "reboot.json"

    def read_runtime(self) -> "Runtime":
        return _read_runtime(self._runtime_file) or Runtime()

    def rotate_serial_log(self, limit: int = SERIAL_LOG_LIMIT) -> None:
        """Before a start: a log past limit becomes serial.log.1 (replacing the one before), so
        a guest's console output over weeks of runs takes bounded room."""
        with contextlib.suppress(FileNotFoundError):
            if self.serial_log.stat().st_size > limit:
                os.replace(self.serial_log, self.serial_log.with_name("serial.log.1"))

    def read_boot_scan(self, run_start: int) -> tuple[int, int]:
        """How far serial.log has been scanned for kernel banners in the run that started at
        byte run_start, and how many were found: (offset, banners)."""
        try:
            data = json.loads(self._boot_scan_file.read_text())
            if int(data["run_start"]) == run_start:
                return int(data["offset"]), int(data["banners"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return run_start, 0

    def write_boot_scan(self, run_start: int, offset: int, banners: int) -> None:
        data = {"run_start": run_start, "offset": offset, "banners": banners}
        _write_atomic(self._boot_scan_file, json.dumps(data))

    def write_runtime(self, runtime: "Runtime") -> None:
        _write_atomic(
            self._runtime_file, json.dumps(_runtime_data(runtime), indent=1, sort_keys=True)
        )


@dataclass
class Runtime:
    """What the backend remembers about a machine's current run (runtime.json).

    links/taps: per NIC, the link state set (QEMU cannot be asked) and the (tap, network) plugged;
    serial_offset: serial.log's size at start (boots count after it); resets: system_resets made.
    """

    links: dict[str, bool] = field(default_factory=dict)
    taps: dict[str, tuple[str, str]] = field(default_factory=dict)
    serial_offset: int = 0
    resets: int = 0


def _runtime_data(runtime: Runtime) -> dict[str, object]:
    return {
        "links": runtime.links,
        "taps": {name: list(pair) for name, pair in runtime.taps.items()},
        "serial_offset": runtime.serial_offset,
        "resets": runtime.resets,
    }


def _read_runtime(path: Path) -> Runtime | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return Runtime(
        links=dict(data.get("links", {})),
        taps={name: (pair[0], pair[1]) for name, pair in data.get("taps", {}).items()},
        serial_offset=int(data.get("serial_offset", 0)),
        resets=int(data.get("resets", 0)),
    )


def _write_atomic(path: Path, text: str) -> None:
    # a temporary file of this writer's own: two writers must not replace each other's half
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
