"""The QEMU backend's base: its settings, and reading and ending a machine's runs.

Status reads take no lock (side effects are idempotent; actions hold the run lock). A live QEMU
(taken over by QEMU's pid file if its launcher died) is asked query-status: "shutdown" is quit
and read as REQUESTED or GUEST_POWEROFF, a panic or internal error as CRASHED. Without one: the
recorded exit, else REQUESTED if a stop was asked, CRASHED if it was launched.
"""

import contextlib
import dataclasses
import os
import re
import time
from pathlib import Path
from typing import Any

from instances.backends.base import (
    BackendError,
    DiskSpec,
    ExitKind,
    MachineSpec,
    MachineStatus,
    Power,
)

from . import process
from .agent import GuestAgent
from .cmdline import ACCELERATORS
from .firmware import OVMF_DIR
from .images import GIB, QemuImg
from .network import BridgedNetworks
from .qmp import Monitor
from .run_folder import RunFolder, Runtime
from .tpm import Swtpm

NETWORK_MODES = ("auto", "bridge", "user")
MACHINE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
KERNEL_BANNER = re.compile(rb"\[\s*0\.0+\] Linux version ")
MAX_SOCKET_PATH = 107  # sun_path is 108 bytes with the final NUL
STOPPED_STATES = {"shutdown", "guest-panicked", "internal-error"}
# QEMU stops the guest at a write that finds its disk full (werror=enospc, the default)
PAUSED_STATES = {"io-error"}


class QemuRuns:
    """The settings and run bookkeeping every part of the QEMU backend shares. `root` holds the
    run folders (keep it short: unix socket paths stay under 108 bytes); `images` is where
    relative spec paths are looked up; `network_mode` "auto" resolves to "bridge" when root."""

    def __init__(
        self,
        root: Path,
        *,
        images: Path | None = None,
        qemu_binary: str = "qemu-system-x86_64",
        accel: str = "tcg",  # or "kvm", or "kvm:tcg": KVM guests hang on some hosts
        network_mode: str = "auto",  # "bridge" (L2 segments, needs root) or "user"
        namespace: str = "zopday",
        network_lock: Path | None = None,  # shared by backends that share the namespace
        qemu_img: str = "qemu-img",
        swtpm: str = "swtpm",
        ovmf_dir: Path = OVMF_DIR,
        monitor_timeout: float = 10.0,
        agent_timeout: float = 5.0,
    ) -> None:
        if accel not in ACCELERATORS:
            raise ValueError(f"accel must be one of {ACCELERATORS}, not {accel!r}")
        if network_mode not in NETWORK_MODES:
            raise ValueError(f"network_mode must be one of {NETWORK_MODES}, not {network_mode!r}")
        # absolute: QEMU and swtpm change to / when they daemonize
        self.root = Path(root).absolute()
        self.root.mkdir(parents=True, exist_ok=True)
        self.images = Path(images).absolute() if images is not None else None
        self.qemu_binary = qemu_binary
        self.accel = accel
        self.ovmf_dir = ovmf_dir
        self.monitor_timeout = monitor_timeout
        self.agent_timeout = agent_timeout
        self.qemu_img = QemuImg(qemu_img)
        self.swtpm = Swtpm(swtpm)
        if network_mode == "auto":
            network_mode = "bridge" if BridgedNetworks.available() else "user"
        elif network_mode == "bridge" and not BridgedNetworks.available():
            raise ValueError("bridge networking needs root and iproute2 (ip)")
        self.network_mode = network_mode
        self.networks = BridgedNetworks(
            namespace, network_lock or self.root / ".network.lock", place=str(self.root)
        )

    def _run_folder(self, machine_id: str) -> RunFolder:
        if not MACHINE_ID.fullmatch(machine_id):
            raise BackendError(f"{machine_id!r} is not a valid machine id.")
        run = RunFolder(self.root / machine_id)
        if len(str(run.serial_socket).encode()) > MAX_SOCKET_PATH:
            raise BackendError(f"The run folder {run.path} is too long for unix sockets.")
        return run

    def _monitor(self, run: RunFolder) -> Monitor:
        return Monitor(run.qmp_socket, timeout=self.monitor_timeout)

    def _agent(self, run: RunFolder) -> GuestAgent:
        return GuestAgent(run.agent_socket, timeout=self.agent_timeout)

    def _agent_listening(self, run: RunFolder) -> bool:
        """Whether the guest has its end of the agent's port open (qemu-ga runs): QEMU knows at
        once, where the agent itself would leave a caller waiting out its timeout."""
        chardevs = self._monitor(run).execute("query-chardev")
        return any(dev["label"] == "agent" and dev.get("frontend-open") for dev in chardevs)

    def _qemu_alive(self, run: RunFolder) -> bool:
        return self._live_pid(run) is not None

    def _live_pid(self, run: RunFolder) -> int | None:
        """The run's live QEMU: the one `pid` names, else one QEMU's own pid file names, whose
        launcher died before recording it (that run is taken over). A pid counts only while its
        process's command line names this run folder's monitor: pids are reused."""
        marker = str(run.qmp_socket)
        pid = run.read_pid()
        if process.is_alive(pid, marker):
            return pid
        launched = process.read_pidfile(run.qemu_pidfile)
        if launched is None or launched == pid or not process.is_alive(launched, marker):
            return None
        with run.lock("end.lock"):  # not while a reader ends a run (its taps are these)
            if run.read_pid() != launched:
                run.begin_start(launched, run.read_launch() or Runtime())
        return launched

    def _await_launch(self, run: RunFolder) -> None:
        """Wait until a QEMU of this machine still setting up (its launcher died) is ready or
        gone: its daemonizing parent exits once it is. A start then takes it over instead of
        launching a second QEMU on the same disks."""
        marker = str(run.qmp_socket)
        deadline = time.monotonic() + process.DAEMON_TIMEOUT
        while (found := process.find(marker)) and found != [self._live_pid(run)]:
            if time.monotonic() > deadline:
                raise BackendError(
                    f"A QEMU of {run.path.name} (pid {', '.join(map(str, found))}) is still "
                    "setting up; Force Shutdown ends it.",
                    retryable=True,
                )
            time.sleep(0.05)

    def _finish_launch(self, run: RunFolder) -> None:
        """A machine whose launcher died before it let the CPUs run (they wait while the links
        are set): set the links and let it run."""
        monitor = self._monitor(run)
        if monitor.execute("query-status")["status"] != "prelaunch":
            return
        links = run.read_runtime().links
        down = [("set_link", {"name": nic, "up": False}) for nic, up in links.items() if not up]
        monitor.execute_all([*down, ("cont", None)])

    def _require_disks_free(self, run: RunFolder, spec: MachineSpec, own: int | None) -> None:
        """No disk of the spec is open in another QEMU (`own` is this machine's QEMU's pid):
        two QEMU processes writing one qcow2 file would corrupt it. QEMU's image lock would
        refuse too, but only after this one set everything else up."""
        paths = {run.disk_path(disk.name): disk.name for disk in spec.disks if disk.role != "cdrom"}
        held = process.holders(list(paths), str(self.root))
        for pid, path in held.items():
            if pid != own:
                name = next(n for p, n in paths.items() if os.path.realpath(p) == str(path))
                raise BackendError(
                    f"Disk {name} is open in another QEMU (pid {pid}): stop that machine first."
                )

    def _settle(self, run: RunFolder) -> MachineStatus:
        """The status, after finishing a run that has ended (see the module docstring)."""
        pid = self._live_pid(run)
        if pid is not None:
            try:
                state = self._monitor(run).execute("query-status")["status"]
            except BackendError:
                if self._qemu_alive(run):
                    raise
            else:
                if state not in STOPPED_STATES:
                    runtime = run.read_runtime()
                    return MachineStatus(
                        Power.RUNNING,
                        pid=pid,
                        boots=self._boots(run, runtime),
                        links=dict(runtime.links),
                        paused=state if state in PAUSED_STATES else "",
                    )
                if state != "shutdown":
                    kind = ExitKind.CRASHED
                elif run.stop_requested():
                    kind = ExitKind.REQUESTED
                else:
                    kind = ExitKind.GUEST_POWEROFF
                return MachineStatus(Power.STOPPED, self._end_run(run, pid, kind))
        recorded = run.read_exit()
        if recorded is not None:
            return MachineStatus(Power.STOPPED, recorded)
        if not run.was_launched():
            return MachineStatus(Power.STOPPED)
        kind = ExitKind.REQUESTED if run.stop_requested() else ExitKind.CRASHED
        return MachineStatus(Power.STOPPED, self._end_run(run, run.read_pid(), kind))

    def _end_run(
        self, run: RunFolder, pid: int | None, kind: ExitKind, *, monitor: bool = True
    ) -> ExitKind:
        """End QEMU `pid` (by signals alone without `monitor`) and record the exit, once: under
        its own lock and only while `pid` is still the run's, as lock-free status reads and a
        new Start may race it (else its taps and swtpm would be the new run's)."""
        with run.lock("end.lock"):
            recorded = run.read_exit()
            if run.read_pid() != pid or recorded is not None:
                return recorded or kind
            if pid is not None and self._qemu_alive(run):
                self._quit(run, pid, monitor=monitor)
            self._finish(run, kind)
            return kind

    def _require_running(self, run: RunFolder) -> MachineStatus:
        status = self._settle(run)
        if status.power is not Power.RUNNING:
            raise BackendError(f"Machine {run.path.name} is not running.")
        return status

    def _quit(self, run: RunFolder, pid: int, *, monitor: bool = True) -> None:
        marker = str(run.qmp_socket)
        if monitor:
            with contextlib.suppress(BackendError):  # gone already, or stuck: signals decide
                Monitor(run.qmp_socket, timeout=3).execute("quit")
            if process.wait_gone(pid, marker, timeout=5):
                return
        process.kill(pid, marker, grace=3)  # SIGTERM: QEMU exits as on quit; then SIGKILL

    def _finish(self, run: RunFolder, kind: ExitKind) -> None:
        self._release(run)
        run.drop_container_disks()
        run.write_exit(kind)

    def _release(self, run: RunFolder, taps: dict[str, tuple[str, str]] | None = None) -> None:
        """Stop the run's helpers: swtpm, and its taps (those of runtime.json by default)."""
        if run.tpm_pidfile.exists():
            self.swtpm.stop(run)
        for tap, network in (taps if taps is not None else run.read_runtime().taps).values():
            self.networks.unplug(tap, network)

    def _plug_nics(self, spec: MachineSpec) -> dict[str, tuple[str, str]]:
        """Taps for the NICs on a segment in bridge mode; other NICs get user-mode networking."""
        if self.network_mode != "bridge":
            return {}
        taps: dict[str, tuple[str, str]] = {}
        try:
            for nic in spec.nics:
                if nic.network:
                    taps[nic.name] = (
                        self.networks.plug(spec.id, nic.name, nic.network, nic.gateway),
                        nic.network,
                    )
        except BackendError:
            for tap, network in taps.values():
                self.networks.unplug(tap, network)
            raise
        return taps

    def _boots(self, run: RunFolder, runtime: Runtime) -> int:
        """Counted from the kernel banners in serial.log since the run began; each read scans
        only the whole lines written since the last (two readers at once just both count)."""
        offset, banners = run.read_boot_scan(runtime.serial_offset)
        try:
            with open(run.serial_log, "rb") as log:
                log.seek(offset)
                text = log.read()
        except OSError:
            text = b""
        scanned = text.rfind(b"\n") + 1  # a banner is a line of its own: no half one is counted
        if scanned:
            banners += len(KERNEL_BANNER.findall(text, 0, scanned))
            run.write_boot_scan(runtime.serial_offset, offset + scanned, banners)
        return max(banners - 1, runtime.resets, 0)

    def _create_disk(self, run: RunFolder, disk: DiskSpec) -> None:
        """Make the disk's file, or grow it to the spec's size: a free disk is resized in the
        console alone, and its file catches up when a machine takes it."""
        if disk.role == "cdrom":
            return
        if disk.claim:
            raise BackendError(
                f"{disk.name}: its image is a volume of a cluster, not of this host."
            )
        path = run.disk_path(disk.name)
        if disk.role == "container":  # immutable: a fresh overlay over the cached image each run
            if disk.source is None:
                raise BackendError(f"Container disk {disk.name} has not been pulled.")
            path.unlink(missing_ok=True)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.qemu_img.create(path, 0, disk.source)
            run.note_container_disk(disk.name)
            return
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                self.qemu_img.create(path, disk.size_gb, disk.source)
            except BackendError:  # a half-made file must not pass for the disk next time
                path.unlink(missing_ok=True)
                raise
            return
        if int(self._own_chain(path, disk)["virtual-size"]) < disk.size_gb * GIB:
            self.qemu_img.resize(path, disk.size_gb)

    def _own_chain(self, path: Path, disk: DiskSpec) -> dict[str, Any]:
        """What qemu-img reads of a disk's file, once it names no file but the image it was made
        over, itself still a standalone qcow2 (an image swapped since could name host files)."""
        info = self.qemu_img.info(path, "qcow2")
        data = info.get("format-specific", {}).get("data", {})
        backing = info.get("full-backing-filename") or info.get("backing-filename")
        foreign = bool(data.get("data-file")) or (
            backing is not None
            and (
                disk.source is None
                or os.path.realpath(backing) != os.path.realpath(disk.source)
                or info.get("backing-filename-format") != "qcow2"
            )
        )
        if foreign:
            raise BackendError(
                f"Disk {disk.name}'s file names a file the console did not make it over: it "
                "will not be opened."
            )
        if backing is not None and disk.source is not None:
            self.qemu_img.require_standalone(disk.source, "qcow2")
        return info

    def _require_iso(self, disk: DiskSpec) -> None:
        """A CD-ROM's medium is a raw ISO to qemu-img too (QEMU opens it as raw anyway)."""
        if disk.source is not None:
            if not disk.source.is_file():
                raise BackendError(f"The ISO {disk.source} of {disk.name} does not exist.")
            self.qemu_img.require_standalone(disk.source, "raw")

    def _disk_file(self, run: RunFolder, disk_name: str) -> Path:
        path = run.disk_path(disk_name)
        if not path.is_file():
            raise BackendError(f"Machine {run.path.name} has no disk {disk_name}.")
        return path

    def _resolve(self, spec: MachineSpec) -> MachineSpec:
        """Relative boot files and images are taken from `images`; everything made absolute."""
        return dataclasses.replace(
            spec,
            kernel=self._absolute(spec.kernel) if spec.kernel else None,
            initrd=self._absolute(spec.initrd) if spec.initrd else None,
            disks=tuple(self._resolve_disk(disk) for disk in spec.disks),
        )

    def _resolve_disk(self, disk: DiskSpec) -> DiskSpec:
        if disk.source is None:
            return disk
        return dataclasses.replace(disk, source=self._absolute(disk.source))

    def _absolute(self, path: Path) -> Path:
        path = Path(path)
        if not path.is_absolute() and self.images is not None:
            path = self.images / path
        return path.absolute()
