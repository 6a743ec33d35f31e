"""The protocol every compute backend implements, and the plain data it works on.

Backends know nothing of Django models: services turn an Instance into a MachineSpec and call
the backend of the instance's host. Backend errors are BackendError, which says whether a retry
can help.
"""

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

# What one machine holds, whichever backend runs it; services refuse more before any work.
MAX_SATA_DEVICES = 6  # SATA disks and CD-ROM drives: the ports of one AHCI controller
HOTPLUG_DISKS = 3  # virtio disks plugged in while it runs, until its next start
# Virtio disks and interfaces together: each takes one of the 26 PCIe slots a q35 machine has
# left after its own devices (display, RNG, serial channels, seed), less the hot-plug ports.
MAX_PCI_DEVICES = 26 - HOTPLUG_DISKS


class BackendError(Exception):
    """A backend operation failed; `message` is written for the user, `retryable` for the task."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable


@dataclass(frozen=True)
class DiskSpec:
    name: str  # stable id, e.g. "disk-12"; also the QEMU device id
    role: str  # "root" | "secondary" | "cdrom"
    bus: str  # "virtio" | "sata" (services resolve "auto" before calling)
    size_gb: int = 0  # for new qcow2 disks
    source: Path | None = None  # qcow2 backing image, or the ISO of a CD-ROM
    boot_order: int | None = None
    serial: str = ""
    reference: str = ""  # OCI reference of a container disk or of a disk copied from its image
    claim: str = ""  # "namespace/name" of the cluster volume (PVC) a KubeVirt disk is cloned from
    # a container disk's registry login, as a .dockerconfigjson (for a cluster's pull secret)
    pull_login: str = field(default="", repr=False)


@dataclass(frozen=True)
class NicSpec:
    name: str  # "eth0", "eth1", ...
    mac: str  # colon notation
    model: str  # "virtio" | "e1000"
    link_up: bool = True
    network: str = ""  # the L2 segment (one per subnet); "" = user-mode networking
    # The segment's gateway with its prefix ("10.77.0.1/24"): the address the host side holds
    # on the segment, from which it reaches the guests (ssh spx@<ip>); "" = none.
    gateway: str = ""


@dataclass(frozen=True)
class FirmwareSpec:
    bootloader: str = "bios"  # "bios" | "uefi"
    secure_boot: bool = False
    persistent_efi: bool = False
    vtpm: bool = False


@dataclass(frozen=True)
class CloudInitSeed:
    """The NoCloud seed: the three files of a `cidata` volume."""

    meta_data: str
    user_data: str
    network_config: str = ""


@dataclass(frozen=True)
class MachineSpec:
    id: str  # stable, filesystem-safe, e.g. "i-42"
    name: str
    vcpus: int
    sockets: int
    cores: int
    threads: int
    memory_mb: int
    firmware: FirmwareSpec = field(default_factory=FirmwareSpec)
    disks: tuple[DiskSpec, ...] = ()
    nics: tuple[NicSpec, ...] = ()
    seed: CloudInitSeed | None = None
    kernel: Path | None = None  # direct kernel boot (the demo image)
    initrd: Path | None = None
    kernel_cmdline: str = ""


class Power(enum.StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"  # no process, or a process that is not running the guest any more


class ExitKind(enum.StrEnum):
    """Why a machine is not running: what run strategies decide on."""

    NONE = "none"  # never started, or still running
    REQUESTED = "requested"  # stopped through the backend (shutdown, force stop)
    GUEST_POWEROFF = "guest-poweroff"  # the guest powered itself off cleanly
    CRASHED = "crashed"  # the process died or the guest panicked


@dataclass(frozen=True)
class MachineStatus:
    power: Power
    exit: ExitKind = ExitKind.NONE
    pid: int | None = None
    boots: int = 0  # resets the backend saw since start (system_reset counts one)
    links: dict[str, bool] = field(default_factory=dict)  # nic name -> carrier up
    paused: str = ""  # why the running machine is paused, if it is: "io-error" (a full disk)


@dataclass(frozen=True)
class MachineFact:
    """One line of what a backend knows about a machine beyond the Instance row, for its page."""

    label: str
    value: str
    url: str = ""


@dataclass(frozen=True)
class GuestInterface:
    name: str
    mac: str
    addresses: tuple[str, ...]  # "10.0.0.5/24"
    carrier: bool | None = None  # as the guest's driver sees it; None: it did not say


@dataclass(frozen=True)
class GuestFacts:
    """What the guest agent reports."""

    hostname: str = ""
    os: str = ""  # the OS's pretty name ("Debian GNU/Linux 12 (bookworm)"); "": not said
    interfaces: tuple[GuestInterface, ...] = ()
    memory_total_kb: int = 0
    memory_available_kb: int = 0
    filesystems: tuple[dict, ...] = ()


@dataclass(frozen=True)
class RemoteConsole:
    """A console its engine serves as a websocket (KubeVirt's console and vnc subresources):
    the URL, the subprotocol and the headers that sign in, and the CA file of its TLS ("" for
    the system's)."""

    url: str
    subprotocol: str
    headers: tuple[tuple[str, str], ...] = ()
    ca_file: str = ""

    def __repr__(self) -> str:  # never the token in a log line
        return f"RemoteConsole({self.url!r})"


@dataclass(frozen=True)
class MigrationReport:
    """How a live migration goes: its phase as the platform names it (Scheduling, Running,
    Succeeded...), from which node to which, and why it failed."""

    phase: str
    source: str = ""
    target: str = ""
    message: str = ""


@runtime_checkable
class Resumes(Protocol):
    """A backend whose hypervisor pauses a guest on a write to a full disk."""

    def resume(self, machine_id: str) -> None:
        """Let the paused guest run on; its write is tried again (and pauses it again while
        the disk is still full)."""
        ...


@runtime_checkable
class Migrates(Protocol):
    """A backend that moves a running machine to another node of its platform."""

    def migrate(
        self, machine_id: str, on_progress: Callable[[MigrationReport], None]
    ) -> MigrationReport:
        """Move it, calling on_progress at each phase; the last report, Succeeded. A migration
        that fails raises BackendError, the machine running on where it was."""
        ...


@dataclass(frozen=True)
class SerialOutput:
    """Guest serial output a cloud keeps, bytes `start` to `next` of all it printed; `start`
    is past the offset asked for when the cloud no longer keeps what came between."""

    text: str
    start: int
    next: int


@runtime_checkable
class ReadsSerialOutput(Protocol):
    """A backend whose cloud serves its VMs' serial output read-only (GCE's getSerialPortOutput),
    polled by the details page from the offset its last answer ended at."""

    serial_output_channel: str  # what the page says the output comes through
    identity: str  # whose identity shell_command runs as: "Google"

    def serial_output(self, machine_id: str, start: int) -> SerialOutput: ...

    def shell_command(self, machine_id: str) -> str:
        """The interactive channel's command for the user's own terminal; "" when none."""


@runtime_checkable
class DialedConsole(Protocol):
    """A console its backend opens itself, speaking its own protocol (a cloud's exec channel):
    the link it returns is the console proxy's, with write, pause/resume reading and close."""

    async def open_link(
        self, on_data: Callable[[bytes], None], on_closed: Callable[[], None]
    ) -> Any: ...


# A console's endpoint: a unix socket on this console's hosts, a websocket of the engine, or a
# channel its backend dials.
ConsoleEndpoint = Path | RemoteConsole | DialedConsole


class Backend(Protocol):
    name: str
    # How users reach a shell of the machine when not through the console's own consoles: a
    # cloud's IAM-gated channel ("SSM", "OS Login"); "" when the console's consoles do it.
    exec_channel: str
    # The console kinds it serves through console_socket ("serial", "vnc", "exec").
    console_kinds: frozenset[str]
    keeps_serial_log: bool  # serial_log() gives the guest's output since it was defined
    # A stop that cannot be withdrawn: the backend cuts the power when the grace given to
    # shutdown() runs out (KubeVirt's stop). Elsewhere the console decides what a timeout means.
    stop_cuts_power: bool

    def define(self, spec: MachineSpec) -> None:
        """Prepare everything the machine needs to start (run folder, disks, seed). Idempotent."""

    def start(self, spec: MachineSpec) -> bool:
        """Power the machine on, defining it first as needed; a running machine is left alone.
        True when this call powered it on, False when it was running already."""

    def shutdown(self, machine_id: str, grace: float | None = None) -> None:
        """ACPI power button: the guest decides how to power off. Where stop_cuts_power, the
        backend cuts the power `grace` seconds later if the guest is still on."""

    def wait_powered_off(self, machine_id: str, timeout: float) -> bool:
        """Block until the guest is off or timeout seconds pass; True when it is off.

        Off may still need tidying (the process ended, its helpers released): the next status()
        does that.
        """

    def withdraw_stop(self, machine_id: str) -> None:
        """A stop asked for (Shutdown, Force Shutdown) was given up on while the guest stayed on:
        a stop from now on is the guest's own or a crash, which the run strategies act on."""

    def force_stop(self, machine_id: str) -> None: ...

    def restart(self, machine_id: str, request: str = "") -> None:
        """Reboot the guest; `request` names the Restart, so that one delivered again after its
        worker died does not reboot the guest twice (where the backend can tell)."""

    def status(self, machine_id: str) -> MachineStatus: ...

    def machine_facts(self, machine_id: str) -> list[MachineFact]:
        """What the details page shows about the machine beyond the Instance row (e.g. a cloud
        VM's own id and its provisioning job). Pages render it: no calls out to a cloud."""

    def set_link(self, machine_id: str, nic_name: str, up: bool) -> bool:
        """Cable in or out on the running machine; False when the NIC is not in it (added since
        it started, or the machine is off): it takes its link from the spec at the next start."""

    def attach_disk(self, spec: MachineSpec, disk: DiskSpec) -> None: ...

    def detach_disk(self, machine_id: str, disk_name: str) -> None: ...

    def resize_disk(self, spec: MachineSpec, disk: DiskSpec) -> None: ...

    def snapshot_disks(
        self, machine_id: str, disks: Sequence[DiskSpec], snapshot_name: str
    ) -> bool:
        """Snapshots of the disks under one name, taken together (all or none); when running,
        the guest's filesystems are frozen once around them if the guest can (its agent
        answers). True when they were. A disk with no storage yet (its machine never started)
        gets it first, as the machine's start would make it."""

    def delete_snapshot(self, machine_id: str, disk_name: str, snapshot_name: str) -> None:
        """Remove a snapshot from the disk; one the disk does not hold is gone already."""

    def revert_snapshot(self, machine_id: str, disk_name: str, snapshot_name: str) -> int:
        """Bring a stopped machine's disk back to the snapshot (which it keeps); the disk's size
        in GB afterwards (the size it had then)."""

    def change_cdrom(self, machine_id: str, disk_name: str, iso: Path | None) -> None: ...

    def guest_facts(self, machine_id: str) -> GuestFacts: ...

    def guest_exec(self, machine_id: str, argv: list[str], timeout: float = 10) -> tuple[int, str]:
        """Run a command in the guest through its agent; exit code and output."""

    def serial_log(self, machine_id: str) -> Path | None:
        """Everything the guest printed on its serial port since it was defined; None when the
        engine keeps no such log (KubeVirt)."""

    def console_socket(self, machine_id: str, kind: str) -> ConsoleEndpoint:
        """Where a console kind ("serial", "vnc" or "exec") is served."""

    def undefine(self, machine_id: str) -> None:
        """Remove everything define() made except disks; the machine must be stopped."""

    def delete_disk(self, disk_name: str) -> None:
        """Remove a disk's storage; the disk must be detached or its machine stopped."""

    def running_machines(self) -> list[str]:
        """Ids of machines whose processes run on this host (for adoption after a restart)."""
