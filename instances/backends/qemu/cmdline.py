"""The QEMU command line of a machine: a pure function of its spec, run folder and a few options.

On q35, virtio disks sit behind their own PCIe root ports (plus spares) so they can hot-unplug;
SATA disks and CD-ROMs use AHCI; the NoCloud seed stays on pcie.0. Every image is opened with
its format named and a disk's backing chain pinned, never as its file's headers say. Monitor
`watch` is for the one power-off waiter, `qmp` for commands. The serial chardev's `logfile=`
keeps every byte; with `-no-shutdown` and `-action panic=pause` a guest power-off is told from
a crash.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from instances.backends.base import (
    HOTPLUG_DISKS,
    MAX_SATA_DEVICES,
    BackendError,
    DiskSpec,
    MachineSpec,
)

from .firmware import Firmware
from .run_folder import RunFolder

AGENT_PORT = "org.qemu.guest_agent.0"
EXEC_PORT = "org.zopday.exec.0"
SEED_DEVICE = "cidata"
NIC_MODELS = {"virtio": "virtio-net-pci", "e1000": "e1000"}
ACCELERATORS = ("tcg", "kvm", "kvm:tcg")


@dataclass(frozen=True)
class LaunchOptions:
    """What the backend decided for this launch, beyond the spec itself."""

    qemu_binary: str = "qemu-system-x86_64"
    accel: str = "tcg"
    firmware: Firmware | None = None
    taps: Mapping[str, str] = field(default_factory=dict)  # NIC name -> tap; others: user-mode
    hotplug_ports: int = HOTPLUG_DISKS  # spare PCIe root ports
    paused: bool = False  # CPUs wait for QMP "cont": links are set before the guest runs
    incoming: bool = False  # waits for a live migration's state (QMP migrate-incoming)


def node_name(disk_name: str) -> str:
    """The block node of a disk (the device id is the disk name itself)."""
    return f"{disk_name}-blk"


def root_port_id(index: int) -> str:
    return f"rp{index}"


def build_argv(spec: MachineSpec, run: RunFolder, options: LaunchOptions) -> list[str]:
    """The full argv; QEMU daemonizes once the machine is set up, so errors surface as its exit."""
    firmware = options.firmware
    secure = firmware is not None and firmware.secure_boot
    argv = [options.qemu_binary, "-name", f"guest={_escape(spec.name or spec.id)}"]
    argv += ["-machine", "q35,smm=on" if secure else "q35", *_accel_args(options.accel)]
    argv += [
        "-smp",
        f"cpus={spec.vcpus},sockets={spec.sockets},cores={spec.cores},threads={spec.threads}",
        "-m",
        str(spec.memory_mb),
        "-nodefaults",
        "-display",
        "none",
        "-vnc",
        f"unix:{_escape(run.vnc_socket)}",
        "-device",
        "VGA",
        "-no-shutdown",
        "-action",
        "panic=pause",
        "-device",
        "pvpanic",
    ]
    for monitor, socket_path in (("qmp", run.qmp_socket), ("watch", run.watch_socket)):
        argv += [*_socket_chardev(monitor, socket_path), "-mon", f"chardev={monitor},mode=control"]
    argv += _socket_chardev("serial0", run.serial_socket, log=run.serial_log)
    argv += ["-serial", "chardev:serial0"]
    argv += ["-object", "rng-random,id=rng0,filename=/dev/urandom"]
    argv += ["-device", "virtio-rng-pci,rng=rng0"]
    argv += ["-device", "virtio-serial-pci,id=vserial"]
    for chardev, socket_path, port in (
        ("agent", run.agent_socket, AGENT_PORT),
        ("exec", run.exec_socket, EXEC_PORT),
    ):
        argv += _socket_chardev(chardev, socket_path)
        argv += ["-device", f"virtserialport,bus=vserial.0,chardev={chardev},name={port}"]
    if firmware is not None:
        argv += _firmware_args(firmware, run.efi_vars)
    if spec.firmware.vtpm:
        argv += ["-chardev", f"socket,id=tpm-chardev,path={_escape(run.tpm_socket)}"]
        argv += [
            "-tpmdev",
            "emulator,id=tpm0,chardev=tpm-chardev",
            "-device",
            "tpm-crb,tpmdev=tpm0",
        ]
    if spec.kernel is not None:
        argv += _kernel_args(spec)
    argv += _disk_args(spec, run, options.hotplug_ports)
    for nic in spec.nics:
        argv += _nic_args(nic.name, nic.mac, nic.model, options.taps.get(nic.name))
    if options.paused:
        argv += ["-S"]
    if options.incoming:
        argv += ["-incoming", "defer"]
    argv += ["-pidfile", str(run.qemu_pidfile), "-daemonize"]
    return argv


def _accel_args(accel: str) -> list[str]:
    if accel == "tcg":
        return ["-accel", "tcg"]
    if accel == "kvm":
        return ["-accel", "kvm", "-cpu", "host"]
    if accel == "kvm:tcg":
        # the default CPU model, because "host" does not exist when QEMU falls back to TCG
        return ["-accel", "kvm", "-accel", "tcg"]
    raise BackendError(
        f"Unknown accelerator {accel!r} (expected one of {', '.join(ACCELERATORS)})."
    )


def _socket_chardev(chardev_id: str, path: Path, *, log: Path | None = None) -> list[str]:
    options = f"socket,id={chardev_id},path={_escape(path)},server=on,wait=off"
    if log is not None:
        options += f",logfile={_escape(log)},logappend=on"
    return ["-chardev", options]


def _firmware_args(firmware: Firmware, vars_path: Path) -> list[str]:
    argv = []
    if firmware.secure_boot:
        argv += ["-global", "driver=cfi.pflash01,property=secure,value=on"]
    argv += [
        "-drive",
        f"if=pflash,format=raw,unit=0,readonly=on,file={_escape(firmware.code)}",
        "-drive",
        f"if=pflash,format=raw,unit=1,file={_escape(vars_path)}",
    ]
    return argv


def _kernel_args(spec: MachineSpec) -> list[str]:
    cmdline = spec.kernel_cmdline.strip()
    if "console=" not in cmdline:
        cmdline = f"console=ttyS0 {cmdline}".strip()
    argv = ["-kernel", str(spec.kernel)]
    if spec.initrd is not None:
        argv += ["-initrd", str(spec.initrd)]
    return [*argv, "-append", cmdline]


def _disk_args(spec: MachineSpec, run: RunFolder, hotplug_ports: int) -> list[str]:
    argv: list[str] = []
    virtio = [d for d in spec.disks if d.role != "cdrom" and d.bus == "virtio"]
    sata = [d for d in spec.disks if d.role == "cdrom" or d.bus == "sata"]
    unknown = [d for d in spec.disks if d.role != "cdrom" and d.bus not in ("virtio", "sata")]
    if unknown:
        raise BackendError(f"Disk {unknown[0].name} has unknown bus {unknown[0].bus!r}.")
    if len(sata) > MAX_SATA_DEVICES:  # ide.0 .. ide.5 on the q35 AHCI controller
        raise BackendError(f"At most {MAX_SATA_DEVICES} SATA disks and CD-ROMs fit on one machine.")
    for index in range(len(virtio) + hotplug_ports):
        argv += ["-device", f"pcie-root-port,id={root_port_id(index)},chassis={index + 1}"]
    for index, disk in enumerate(virtio):
        argv += _qcow2_blockdev(disk, run)
        argv += ["-device", _device("virtio-blk-pci", disk, bus=root_port_id(index))]
    for index, disk in enumerate(sata):
        bus = f"ide.{index}"
        if disk.role != "cdrom":
            argv += _qcow2_blockdev(disk, run)
            argv += ["-device", _device("ide-hd", disk, bus=bus)]
        elif disk.source is not None:
            argv += _raw_blockdev(node_name(disk.name), disk.source)
            argv += ["-device", _device("ide-cd", disk, bus=bus)]
        else:  # an empty tray: media come later through change_cdrom
            argv += ["-device", _device("ide-cd", disk, bus=bus, drive=False)]
    if spec.seed is not None:
        argv += _raw_blockdev(node_name(SEED_DEVICE), run.seed_iso)
        argv += ["-device", f"virtio-blk-pci,drive={node_name(SEED_DEVICE)},id={SEED_DEVICE}"]
    return argv


def _qcow2_blockdev(disk: DiskSpec, run: RunFolder) -> list[str]:
    return ["-blockdev", json.dumps(qcow2_node(disk, run.disk_path(disk.name)))]


def qcow2_node(disk: DiskSpec, path: Path) -> dict[str, Any]:
    """A disk's block node with its backing chain pinned: the image it was made over (itself
    with no backing) or none, whatever files the qcow2 headers name."""
    backing: dict[str, Any] | None = None
    if disk.source is not None:
        backing = {
            "driver": "qcow2",
            "node-name": f"{disk.name}-base",
            "read-only": True,
            "file": {"driver": "file", "filename": str(disk.source)},
            "backing": None,
        }
    return {
        "driver": "qcow2",
        "node-name": node_name(disk.name),
        "file": {"driver": "file", "filename": str(path)},
        "backing": backing,
    }


def _raw_blockdev(node: str, path: Path) -> list[str]:
    return [
        "-blockdev",
        f"driver=raw,node-name={node},read-only=on,file.driver=file,file.filename={_escape(path)}",
    ]


def _device(driver: str, disk: DiskSpec, *, bus: str, drive: bool = True) -> str:
    options = f"{driver},id={disk.name},bus={bus}"
    if drive:
        options += f",drive={node_name(disk.name)}"
    if disk.serial and disk.role != "cdrom":
        options += f",serial={_escape(disk.serial)}"
    if disk.boot_order is not None:
        options += f",bootindex={disk.boot_order}"
    return options


def _nic_args(name: str, mac: str, model: str, tap: str | None) -> list[str]:
    if model not in NIC_MODELS:
        raise BackendError(f"NIC {name} has unknown model {model!r} (expected virtio or e1000).")
    netdev = (
        f"tap,id=net-{name},ifname={tap},script=no,downscript=no" if tap else f"user,id=net-{name}"
    )
    return [
        "-netdev",
        netdev,
        "-device",
        f"{NIC_MODELS[model]},netdev=net-{name},mac={mac},id={name}",
    ]


def _escape(value: object) -> str:
    """QEMU option values double their commas."""
    return str(value).replace(",", ",,")
