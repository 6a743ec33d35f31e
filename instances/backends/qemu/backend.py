"""The QEMU backend: each machine is a daemonized QEMU process controlled over QMP.

Everything a machine has lives in its run folder (`root/<machine id>/`, see run_folder.py), so a
fresh backend object, in a restarted worker or another process, finds running machines again.
Status reads are in runs.py, device changes in devices.py, snapshots in snapshots.py.
"""

import contextlib
import shutil
import time
from pathlib import Path

from instances.backends.base import (
    BackendError,
    ExitKind,
    GuestFacts,
    MachineFact,
    MachineSpec,
    MachineStatus,
    Power,
)
from instances.holds import hold_point

from . import process
from .cmdline import LaunchOptions, build_argv
from .devices import QemuDevices
from .firmware import firmware_for, prepare_vars
from .migration import QemuMigration
from .qmp import Monitor
from .run_folder import RunFolder, Runtime, disk_store
from .runs import STOPPED_STATES
from .seed import write_seed_iso
from .snapshots import QemuSnapshots

POWER_OFF_EVENTS = {"SHUTDOWN", "GUEST_PANICKED"}  # the events that enter STOPPED_STATES
# how long a Restart delivered again waits to see the reboot an earlier delivery sent
REBOOT_SEEN_SECONDS = 60


class QemuBackend(QemuDevices, QemuSnapshots, QemuMigration):
    """Machines as local QEMU processes. A start waits for a QEMU of the machine still setting
    up, and refuses disks another QEMU holds open: two QEMU processes never open one disk."""

    name = "qemu"
    exec_channel = ""  # the console's own serial, VNC and exec consoles
    console_kinds = frozenset({"serial", "vnc", "exec"})
    keeps_serial_log = True
    stop_cuts_power = False

    # ---- lifecycle ---------------------------------------------------------------------------

    def define(self, spec: MachineSpec) -> None:
        spec = self._resolve(spec)
        for path in (spec.kernel, spec.initrd):
            if path is not None and not path.is_file():
                raise BackendError(f"The boot file {path} does not exist.")
        for disk in spec.disks:
            if disk.role == "cdrom":
                self._require_iso(disk)
        run = self._run_folder(spec.id)
        run.create()
        for disk in spec.disks:
            self._create_disk(run, disk)
        if spec.seed is not None:
            write_seed_iso(spec.seed, run.seed_iso)
        firmware = firmware_for(spec.firmware, self.ovmf_dir)
        if firmware is not None:
            prepare_vars(run, firmware, persistent=True)

    def start(self, spec: MachineSpec, *, incoming: bool = False) -> bool:
        """Launch QEMU (detached: it outlives the caller); a running machine is left alone.
        Whether this call launched it. `incoming`: it waits for a live migration's state."""
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
            down = [] if incoming else down  # the links come with the migrated state
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
                    incoming=incoming,
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

    def shutdown(self, machine_id: str, grace: float | None = None) -> None:
        """Press the ACPI power button and return; the guest decides. A guest off already ignores
        the press, and the next status read records its stop as REQUESTED."""
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

    def restart(self, machine_id: str, request: str = "") -> None:
        """Ask the guest OS to reboot, through its agent; a hard reset (system_reset) when it has
        no agent or the agent refuses. A shutdown asked for earlier is forgotten. A `request`
        delivered again (its worker died) whose reboot was sent is done once the guest rebooted."""
        run = self._run_folder(machine_id)
        with run.lock():
            status = self._require_running(run)
            run.clear_stop_requested()
            has_agent = self._agent_listening(run)
            sent = run.read_reboot()
        if request and sent.get("request") == request and self._rebooted_since(run, sent):
            return
        hold_point("restart.before-reboot")
        run.note_reboot(request, status.pid or 0, status.boots)
        if has_agent:  # unlocked: an agent slow to answer keeps no Force Shutdown waiting
            with contextlib.suppress(BackendError):  # it did not answer, or refused: reset
                self._agent(run).reboot()
                hold_point("restart.sent")
                return
        with run.lock():
            self._require_running(run)  # not if a Force Shutdown ended it meanwhile
            self._monitor(run).execute("system_reset")
            runtime = run.read_runtime()  # after the reset: a count is never ahead of it
            runtime.resets += 1
            run.write_runtime(runtime)

    def _rebooted_since(self, run: RunFolder, sent: dict[str, object]) -> bool:
        """Whether the guest booted again (or QEMU is another) since the reboot `sent` was sent;
        waited for a while, since a guest takes some time to go down."""
        deadline = time.monotonic() + REBOOT_SEEN_SECONDS
        while True:
            status = self.status(run.path.name)
            if status.power is not Power.RUNNING or status.pid != sent.get("pid"):
                return True  # stopped, or started afresh: nothing is left to reboot
            if status.boots > int(str(sent.get("boots", 0))):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)

    def resume(self, machine_id: str) -> None:
        """`cont` a guest QEMU paused on an I/O error (space has been freed, we hope)."""
        run = self._run_folder(machine_id)
        with run.lock():
            if self._require_running(run).paused:
                self._monitor(run).execute("cont")

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
