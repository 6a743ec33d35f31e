"""The QEMU backend: each machine is a daemonized QEMU process controlled over QMP.

Everything a machine has lives in its run folder (`root/<machine id>/`, see run_folder.py), so a
fresh backend object, in a restarted worker or another process, finds running machines again.

How a machine's status is read (status() and every action start from it):
1. The pid file names a live QEMU (its command line names our run folder), or QEMU's own pid file
   does (its launcher died before recording it: the run is taken over): ask QMP query-status.
   - "running" (or paused, starting, ...) -> RUNNING, with boots and links.
   - "shutdown": the guest powered off (QEMU stays thanks to -no-shutdown). The backend quits that
     QEMU and records the exit: REQUESTED if shutdown()/force_stop() asked for a stop since the
     start (they write a marker first), else GUEST_POWEROFF.
   - "guest-panicked" (pvpanic) or "internal-error": quit and record CRASHED.
2. No live process: the recorded exit kind; without one, REQUESTED if a stop was asked for, CRASHED
   if the machine had been launched (killed, or QEMU died), NONE if it never was.
Reading the status is lock-free and its side effects are idempotent; actions that change the
process hold the run folder's lock. A start first waits for a QEMU of the machine still setting
up, and refuses disks another QEMU holds open: two QEMU processes never open one disk.

boots counts the resets of the current run: the kernel banners QEMU recorded in serial.log since the
start (a banner is the kernel's first line, stamped 0.000000) minus the first one, and at least the
system_resets asked through restart(). Nothing listens for QMP RESET events between calls.

links are what the backend set (the spec at start, then set_link): QEMU cannot be asked for them.
"""

import contextlib
import dataclasses
import os
import re
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from instances.backends.base import (
    BackendError,
    DiskSpec,
    ExitKind,
    GuestFacts,
    MachineFact,
    MachineSpec,
    MachineStatus,
    Power,
)
from instances.holds import hold_point

from . import process
from .agent import GuestAgent
from .cmdline import ACCELERATORS, LaunchOptions, build_argv, node_name
from .firmware import OVMF_DIR, firmware_for, prepare_vars
from .images import GIB, QemuImg
from .network import BridgedNetworks
from .qmp import CommandRefused, Monitor
from .run_folder import RunFolder, Runtime, disk_store
from .seed import write_seed_iso
from .tpm import Swtpm

NETWORK_MODES = ("auto", "bridge", "user")
MACHINE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
KERNEL_BANNER = re.compile(rb"\[\s*0\.0+\] Linux version ")
MAX_SOCKET_PATH = 107  # sun_path is 108 bytes with the final NUL
STOPPED_STATES = {"shutdown", "guest-panicked", "internal-error"}
FSFREEZE_TIMEOUT = 60.0  # flushing a busy guest's writes before the freeze takes a while
SNAPSHOT_TIMEOUT = 60.0  # an internal snapshot of a large disk writes its metadata
POWER_OFF_EVENTS = {"SHUTDOWN", "GUEST_PANICKED"}  # the events that enter those states


class QemuBackend:
    """Machines as local QEMU processes.

    root: the folder of run folders (keep it short: unix socket paths must stay under 108 bytes).
    images: where relative kernel, initrd and disk image paths of a spec are looked up.
    accel: "tcg" (default: KVM guests hang on some hosts), "kvm", or "kvm:tcg" (KVM if usable).
    network_mode: "bridge" (real L2 segments in a network namespace; needs root), "user" (QEMU
    user-mode networking, no traffic between guests) or "auto" (bridge when root). The resolved
    mode is `network_mode`, for the UI to state.
    namespace: the network namespace the product owns in bridge mode.
    """

    name = "qemu"
    exec_channel = ""  # the console's own serial, VNC and exec consoles

    def __init__(
        self,
        root: Path,
        *,
        images: Path | None = None,
        qemu_binary: str = "qemu-system-x86_64",
        accel: str = "tcg",
        network_mode: str = "auto",
        namespace: str = "zopday",
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
        self.networks = BridgedNetworks(namespace, self.root / ".network.lock")

    # ---- lifecycle ---------------------------------------------------------------------------

    def define(self, spec: MachineSpec) -> None:
        spec = self._resolve(spec)
        for path in (spec.kernel, spec.initrd):
            if path is not None and not path.is_file():
                raise BackendError(f"The boot file {path} does not exist.")
        for disk in spec.disks:
            if disk.role == "cdrom" and disk.source is not None and not disk.source.is_file():
                raise BackendError(f"The ISO {disk.source} of {disk.name} does not exist.")
        run = self._run_folder(spec.id)
        run.create()
        for disk in spec.disks:
            self._create_disk(run, disk)
        if spec.seed is not None:
            write_seed_iso(spec.seed, run.seed_iso)
        firmware = firmware_for(spec.firmware, self.ovmf_dir)
        if firmware is not None:
            prepare_vars(run, firmware, persistent=True)

    def start(self, spec: MachineSpec) -> bool:
        """Launch QEMU (detached: it outlives the caller); a running machine is left alone.
        Whether this call launched it."""
        spec = self._resolve(spec)
        run = self._run_folder(spec.id)
        with run.lock():
            self._await_launch(run)
            if self._settle(run).power is Power.RUNNING:
                self._finish_launch(run)
                return False
            self._require_disks_free(run, spec, own=None)
            self.define(spec)
            if shutil.which(self.qemu_binary) is None:
                raise BackendError(
                    f"{self.qemu_binary} is not installed (apt-get install qemu-system-x86)."
                )
            firmware = firmware_for(spec.firmware, self.ovmf_dir)
            if firmware is not None:
                prepare_vars(run, firmware, persistent=spec.firmware.persistent_efi)
            links = {nic.name: nic.link_up for nic in spec.nics}
            down = [("set_link", {"name": nic, "up": False}) for nic, up in links.items() if not up]
            taps: dict[str, tuple[str, str]] = {}
            try:
                if spec.firmware.vtpm:
                    self.swtpm.start(run)
                taps = self._plug_nics(spec)
                options = LaunchOptions(
                    qemu_binary=self.qemu_binary,
                    accel=self.accel,
                    firmware=firmware,
                    taps={nic: tap for nic, (tap, _) in taps.items()},
                    paused=bool(down),
                )
                argv = build_argv(spec, run, options)
                if taps:
                    argv = self.networks.exec_prefix() + argv
                run.rotate_serial_log()
                serial_offset = run.serial_log.stat().st_size if run.serial_log.exists() else 0
                runtime = Runtime(links=links, taps=taps, serial_offset=serial_offset)
                run.qemu_pidfile.unlink(missing_ok=True)
                run.write_launch(runtime)
                hold_point("start.before-spawn")
                process.run_daemon(argv, run.qemu_log, what="QEMU")
                pid = process.read_pidfile(run.qemu_pidfile)
                if pid is None:
                    raise BackendError("QEMU started but wrote no pid file.")
            except BaseException:
                run.clear_launch()
                self._release(run, taps)
                raise
            hold_point("start.spawned")
            run.begin_start(pid, runtime)
            if down:  # the guest first runs with its cables out, or not at all
                try:
                    self._monitor(run).execute_all([*down, ("cont", None)])
                except BackendError:
                    self._end_run(run, pid, ExitKind.REQUESTED, monitor=False)
                    raise
        return True

    def shutdown(self, machine_id: str) -> None:
        """Press the ACPI power button; the guest decides. The stop reads REQUESTED afterwards.

        Just the press, the moment the monitor answers: QEMU ignores it for a guest that is off
        already, and the wait for the power-off (or the next status read) finishes such a run,
        recording the stop as asked for."""
        run = self._run_folder(machine_id)
        with run.lock():
            if not self._qemu_alive(run):
                self._settle(run)  # finish the run that ended
                return
            run.mark_stop_requested()
            try:
                self._monitor(run).execute("system_powerdown")
            except BackendError:
                if self._qemu_alive(run):
                    raise
                self._settle(run)  # a status read ended it meanwhile: the guest was off

    def wait_powered_off(self, machine_id: str, timeout: float) -> bool:
        """Waits on the watch monitor for QEMU's SHUTDOWN (or a crash) event, not by polling."""
        run = self._run_folder(machine_id)
        if not run.watch_socket.exists():  # launched before the watch monitor existed
            return self._poll_powered_off(machine_id, timeout)
        watch = Monitor(run.watch_socket, timeout=self.monitor_timeout)
        deadline = time.monotonic() + max(0.0, timeout)
        while self._qemu_alive(run):
            remaining = max(0.0, deadline - time.monotonic())
            # a dropped or refused connection is no answer: look again until the deadline (a
            # monitor that really fails shows in the next press, on the other monitor)
            with contextlib.suppress(BackendError):
                if watch.wait_for_status(STOPPED_STATES, POWER_OFF_EVENTS, remaining):
                    return True
            if time.monotonic() >= deadline:
                return not self._qemu_alive(run)
            time.sleep(0.05)
        return True

    def withdraw_stop(self, machine_id: str) -> None:
        """Forget the stop shutdown() or force_stop() asked for, unless the guest went off
        meanwhile (then it did as it was asked, and the status read records it so)."""
        run = self._run_folder(machine_id)
        with run.lock():
            if self._settle(run).power is Power.RUNNING:
                run.clear_stop_requested()

    def _poll_powered_off(self, machine_id: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.status(machine_id).power is Power.RUNNING:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def force_stop(self, machine_id: str) -> None:
        """QMP quit (signals if QEMU lingers, or if its monitor does not answer: a hung QEMU is
        what Force Shutdown is for); returns once the process is gone."""
        run = self._run_folder(machine_id)
        with run.lock():
            try:
                status = self._settle(run)
            except BackendError:  # QEMU lives (the status read says so) but its monitor is stuck
                run.mark_stop_requested()
                self._end_run(run, self._live_pid(run), ExitKind.REQUESTED, monitor=False)
            else:
                if status.power is Power.RUNNING and status.pid is not None:
                    run.mark_stop_requested()
                    hold_point("force_stop.before-quit")
                    self._end_run(run, status.pid, ExitKind.REQUESTED)
            # a QEMU no pid file names yet (still daemonizing, launched by a worker that died)
            marker = str(run.qmp_socket)
            for pid in process.find(marker):
                process.kill(pid, marker, grace=1)

    def restart(self, machine_id: str) -> None:
        """Ask the guest OS to reboot, through its agent; a hard reset (system_reset) when it has
        no agent or the agent refuses. A shutdown asked for earlier is forgotten."""
        run = self._run_folder(machine_id)
        with run.lock():
            self._require_running(run)
            run.clear_stop_requested()
            has_agent = self._agent_listening(run)
        hold_point("restart.before-reboot")
        if has_agent:  # unlocked: an agent slow to answer keeps no Force Shutdown waiting
            with contextlib.suppress(BackendError):  # it did not answer, or refused: reset
                self._agent(run).reboot()
                return
        with run.lock():
            self._require_running(run)  # not if a Force Shutdown ended it meanwhile
            runtime = run.read_runtime()
            runtime.resets += 1
            run.write_runtime(runtime)
            self._monitor(run).execute("system_reset")

    def status(self, machine_id: str) -> MachineStatus:
        run = self._run_folder(machine_id)
        if not run.exists():
            return MachineStatus(Power.STOPPED)
        return self._settle(run)

    def machine_facts(self, machine_id: str) -> list[MachineFact]:
        return []  # the Instance row and its tabs say it all

    def running_machines(self) -> list[str]:
        return sorted(
            folder.name
            for folder in self.root.iterdir()
            if folder.is_dir()
            and folder != disk_store(self.root)
            and self._qemu_alive(RunFolder(folder))
        )

    def undefine(self, machine_id: str) -> None:
        """Remove the machine (its instance is deleted): a QEMU still running there, one the
        console read as off because its monitor hung, is ended first."""
        run = self._run_folder(machine_id)
        if not run.exists():
            return
        with run.lock():
            if (pid := self._live_pid(run)) is not None:
                self._end_run(run, pid, ExitKind.REQUESTED, monitor=False)
            marker = str(run.qmp_socket)
            for stray in process.find(marker):
                process.kill(stray, marker, grace=1)
            self._release(run)
            shutil.rmtree(run.path)

    def delete_disk(self, disk_name: str) -> None:
        """Remove a disk's file; the disk must not be attached to a running machine."""
        (disk_store(self.root) / f"{disk_name}.qcow2").unlink(missing_ok=True)

    # ---- devices -----------------------------------------------------------------------------

    def set_link(self, machine_id: str, nic_name: str, up: bool) -> bool:
        """Cable in or out; a stopped machine, or a NIC added since the start, takes its link
        from the spec at the next start."""
        run = self._run_folder(machine_id)
        with run.lock():  # runtime.json is read, changed and written back: one writer at a time
            if self._settle(run).power is Power.STOPPED:
                return False
            runtime = run.read_runtime()
            if nic_name not in runtime.links:
                return False
            self._monitor(run).execute("set_link", {"name": nic_name, "up": up})
            runtime.links[nic_name] = up
            run.write_runtime(runtime)
            return True

    def attach_disk(self, spec: MachineSpec, disk: DiskSpec) -> None:
        """Create the disk; hotplug it when running (virtio only: SATA has no hotplug in QEMU).

        Under the run lock: a start waits for it, and two hotplugs do not pick the same free
        port. A retry after a timeout finds what the earlier attempt did and carries on."""
        disk = self._resolve_disk(disk)
        run = self._run_folder(spec.id)
        with run.lock():
            if disk.role != "cdrom":
                pid = self._live_pid(run)
                self._require_disks_free(run, dataclasses.replace(spec, disks=(disk,)), pid)
            self._create_disk(run, disk)
            if self._settle(run).power is Power.STOPPED:
                return
            if disk.role == "cdrom" or disk.bus != "virtio":
                raise BackendError(
                    "SATA disks and CD-ROMs can only be added while the machine is stopped."
                )
            monitor = self._monitor(run)
            if self._device_type(monitor, disk.name) is not None:
                return
            device: dict[str, Any] = {
                "driver": "virtio-blk-pci",
                "id": disk.name,
                "drive": node_name(disk.name),
                "bus": self._free_root_port(monitor),
            }
            if disk.serial:
                device["serial"] = disk.serial
            nodes = {node["node-name"] for node in monitor.execute("query-named-block-nodes")}
            if device["drive"] not in nodes:
                file = {"driver": "file", "filename": str(run.disk_path(disk.name))}
                monitor.execute(
                    "blockdev-add", {"driver": "qcow2", "node-name": device["drive"], "file": file}
                )
            hold_point("hotplug.block-added")
            try:
                monitor.execute("device_add", device)
            except BackendError:
                with contextlib.suppress(BackendError):  # the first error is the one to tell
                    monitor.execute("blockdev-del", {"node-name": device["drive"]})
                raise

    def detach_disk(self, machine_id: str, disk_name: str) -> None:
        """Unplug a virtio disk from a running machine (the guest must let go); keeps the file."""
        run = self._run_folder(machine_id)
        if self._settle(run).power is Power.STOPPED:
            return
        monitor = self._monitor(run)
        device_type = self._device_type(monitor, disk_name)
        if device_type is not None:
            if not device_type.startswith("virtio-blk"):
                raise BackendError(
                    "Only virtio disks can be detached while the machine runs; stop it first."
                )
            monitor.execute("device_del", {"id": disk_name})
            if not self._wait_device_gone(monitor, disk_name, timeout=15):
                raise BackendError(
                    f"The guest did not release disk {disk_name} yet.", retryable=True
                )
        with contextlib.suppress(CommandRefused):  # gone already: an earlier attempt got this far
            monitor.execute("blockdev-del", {"node-name": node_name(disk_name)})

    def resize_disk(self, spec: MachineSpec, disk: DiskSpec) -> None:
        """Grow a disk to disk.size_gb (online with block_resize when running). A disk with no
        file yet is made at its new size when its machine is defined."""
        run = self._run_folder(spec.id)
        with run.lock():  # a start waits: QEMU and qemu-img must not both open the file
            path = run.disk_path(disk.name)
            if not path.is_file():
                return
            current = self.qemu_img.virtual_size(path)
            wanted = disk.size_gb * GIB
            if wanted < current:
                raise BackendError(
                    f"Disks can only grow: {disk.name} is {current / GIB:g} GiB already."
                )
            if wanted == current:
                return
            if self._settle(run).power is Power.RUNNING:
                hold_point("resize.before-resize")
                self._monitor(run).execute(
                    "block_resize", {"node-name": node_name(disk.name), "size": wanted}
                )
            else:
                self.qemu_img.resize(path, disk.size_gb)

    def snapshot_disks(
        self, machine_id: str, disks: Sequence[DiskSpec], snapshot_name: str
    ) -> bool:
        """Internal qcow2 snapshots of the disks under one name. When running: one QMP
        transaction (all of them or none), inside one guest fsfreeze (always thawed) if the
        guest has an agent, else as a crash would leave the disks. Whether it was frozen.

        A stopped machine's disk that has no file yet (its instance never started) gets it
        first, as the machine's first start would make it: the snapshot is of the new disk.

        Safe to retry: snapshots an earlier attempt took (its answer lost to a timeout) count
        as taken, and a freeze it left behind is thawed. One snapshot at a time per machine, so
        one's thaw never ends another's freeze."""
        run = self._run_folder(machine_id)
        disk_names = [disk.name for disk in disks]
        with run.lock():  # a start waits for qemu-img
            if self._settle(run).power is Power.STOPPED:
                for disk in disks:
                    self._create_disk(run, self._resolve_disk(disk))
                for path in [self._disk_file(run, name) for name in disk_names]:
                    if snapshot_name not in self.qemu_img.snapshots(path):
                        self.qemu_img.snapshot(path, snapshot_name)
                return False
        with run.lock("snapshot.lock"):
            monitor = self._monitor(run)
            agent = GuestAgent(run.agent_socket, timeout=FSFREEZE_TIMEOUT)
            has_agent = self._agent_listening(run)
            if has_agent:
                try:
                    frozen_before = self._agent(run).freeze_status() == "frozen"
                except BackendError as error:
                    if error.retryable:  # no answer: frozen or not, it cannot be told
                        raise
                    has_agent = False  # this agent has no fsfreeze: the snapshot is unfrozen
                else:
                    if frozen_before:  # an earlier attempt's; if it cannot be thawed, retry
                        agent.thaw()
            held = self._node_snapshots(monitor, disk_names)
            missing = [name for name in disk_names if snapshot_name not in held[name]]
            if not missing:
                return False
            frozen = has_agent and _freeze(agent)
            hold_point("snapshot.frozen")
            actions = [
                {
                    "type": "blockdev-snapshot-internal-sync",
                    "data": {"device": node_name(name), "name": snapshot_name},
                }
                for name in missing
            ]
            try:
                Monitor(run.qmp_socket, timeout=SNAPSHOT_TIMEOUT).execute(
                    "transaction", {"actions": actions}
                )
            finally:
                if frozen:
                    agent.thaw()
            return frozen

    def delete_snapshot(self, machine_id: str, disk_name: str, snapshot_name: str) -> None:
        """qemu-img when stopped, else QEMU itself; under the snapshot lock, so it never
        overlaps the taking of another. A snapshot the disk does not hold is gone already."""
        run = self._run_folder(machine_id)
        path = self._disk_file(run, disk_name)
        with run.lock():  # a start waits for qemu-img
            if self._settle(run).power is Power.STOPPED:
                if snapshot_name in self.qemu_img.snapshots(path):
                    self.qemu_img.delete_snapshot(path, snapshot_name)
                return
        with run.lock("snapshot.lock"):
            if snapshot_name in self._node_snapshots(self._monitor(run), [disk_name])[disk_name]:
                Monitor(run.qmp_socket, timeout=SNAPSHOT_TIMEOUT).execute(
                    "blockdev-snapshot-delete-internal-sync",
                    {"device": node_name(disk_name), "name": snapshot_name},
                )

    def revert_snapshot(self, machine_id: str, disk_name: str, snapshot_name: str) -> int:
        """qemu-img, under the machine's lock: a start waits for it to finish."""
        run = self._run_folder(machine_id)
        with run.lock():
            if self._settle(run).power is not Power.STOPPED:
                raise BackendError("Stop the instance before reverting a disk to a snapshot.")
            path = self._disk_file(run, disk_name)
            if snapshot_name not in self.qemu_img.snapshots(path):
                raise BackendError(f"{disk_name} has no snapshot called {snapshot_name}.")
            self.qemu_img.revert_snapshot(path, snapshot_name)
            return self.qemu_img.virtual_size(path) // GIB

    def change_cdrom(self, machine_id: str, disk_name: str, iso: Path | None) -> None:
        """Insert or eject media of a running machine; a stopped one boots with its spec's ISO."""
        run = self._run_folder(machine_id)
        if self._settle(run).power is Power.STOPPED:
            return
        monitor = self._monitor(run)
        if iso is None:
            monitor.execute("eject", {"id": disk_name, "force": True})
            return
        iso = self._absolute(iso)
        if not iso.is_file():
            raise BackendError(f"The ISO {iso} does not exist.")
        monitor.execute(  # force: a guest that mounted the old disc keeps the tray locked
            "blockdev-change-medium",
            {
                "id": disk_name,
                "filename": str(iso),
                "format": "raw",
                "read-only-mode": "read-only",
                "force": True,
            },
        )

    # ---- guest -------------------------------------------------------------------------------

    def guest_facts(self, machine_id: str) -> GuestFacts:
        run = self._run_folder(machine_id)
        self._require_running(run)
        if not self._agent_listening(run):  # asking would wait out the agent's timeout
            raise BackendError("The guest agent is not running in the guest.", retryable=True)
        return self._agent(run).facts()

    def guest_exec(self, machine_id: str, argv: list[str], timeout: float = 10) -> tuple[int, str]:
        run = self._run_folder(machine_id)
        self._require_running(run)
        return self._agent(run).execute(argv, timeout)

    def console_socket(self, machine_id: str, kind: str) -> Path:
        run = self._run_folder(machine_id)
        sockets = {"serial": run.serial_socket, "vnc": run.vnc_socket, "exec": run.exec_socket}
        if kind not in sockets:
            raise BackendError(f"Unknown console kind {kind!r} (serial, vnc or exec).")
        return sockets[kind]

    def serial_log(self, machine_id: str) -> Path:
        """Everything the guest printed on its serial port, across starts (QEMU appends to it)."""
        return self._run_folder(machine_id).serial_log

    # ---- internals ---------------------------------------------------------------------------

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
        """End the run of QEMU `pid` and record how it ended; the exit recorded. Without
        `monitor`, QEMU is ended by signals alone.

        Status reads take no run lock, so two readers may both find a run over, and a Start may
        begin the next run meanwhile: the ending happens once, under its own lock, and only while
        `pid` is still the run's (else its taps and swtpm would be the new run's)."""
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
        path = run.disk_path(disk.name)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                self.qemu_img.create(path, disk.size_gb, disk.source)
            except BackendError:  # a half-made file must not pass for the disk next time
                path.unlink(missing_ok=True)
                raise
        elif self.qemu_img.virtual_size(path) < disk.size_gb * GIB:
            self.qemu_img.resize(path, disk.size_gb)

    def _disk_file(self, run: RunFolder, disk_name: str) -> Path:
        path = run.disk_path(disk_name)
        if not path.is_file():
            raise BackendError(f"Machine {run.path.name} has no disk {disk_name}.")
        return path

    def _device_type(self, monitor: Monitor, device_id: str) -> str | None:
        try:
            return str(
                monitor.execute(
                    "qom-get", {"path": f"/machine/peripheral/{device_id}", "property": "type"}
                )
            )
        except CommandRefused:
            return None

    def _wait_device_gone(self, monitor: Monitor, device_id: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self._device_type(monitor, device_id) is not None:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def _node_snapshots(self, monitor: Monitor, disk_names: Sequence[str]) -> dict[str, set[str]]:
        """The names of the internal snapshots each of a running machine's disks holds."""
        nodes = {node.get("node-name"): node for node in monitor.execute("query-named-block-nodes")}
        held = {}
        for disk_name in disk_names:
            if (node := nodes.get(node_name(disk_name))) is None:
                machine = monitor.socket_path.parent.name
                raise BackendError(f"Machine {machine} has no disk {disk_name}.")
            held[disk_name] = {snapshot["name"] for snapshot in node["image"].get("snapshots", [])}
        return held

    def _free_root_port(self, monitor: Monitor) -> str:
        for bus in monitor.execute("query-pci"):
            for device in bus["devices"]:
                bridge = device.get("pci_bridge")
                port = device.get("qdev_id", "")
                if bridge is not None and port.startswith("rp") and not bridge.get("devices"):
                    return str(port)
        raise BackendError("No free hotplug slot is left: stop the machine to attach more disks.")

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


def _freeze(agent: GuestAgent) -> bool:
    """Freeze the guest's filesystems: whether they are. A freeze that failed is undone; one
    that cannot be undone is an error, as a snapshot taken then could leave the guest frozen."""
    try:
        agent.freeze()
    except BackendError:  # refused, or no answer in time
        try:
            agent.thaw()
        except BackendError as error:
            if not error.retryable:  # refused too: nothing is frozen
                return False
            raise BackendError(
                "The guest agent did not finish freezing the filesystems and could not thaw "
                f"them ({error.message}).",
                retryable=True,
            ) from error
        return False
    return True
