"""Device changes of a QEMU machine: links, disk hotplug and resize, CD-ROM media."""

import contextlib
import dataclasses
import time
from pathlib import Path
from typing import Any

from instances.backends.base import BackendError, DiskSpec, MachineSpec, Power
from instances.holds import hold_point

from .cmdline import node_name, qcow2_node
from .images import GIB
from .qmp import CommandRefused, Monitor
from .run_folder import RunFolder
from .runs import QemuRuns


class QemuDevices(QemuRuns):
    """Changes to a machine's devices, running (over QMP) or stopped (its files only)."""

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
        """Create the disk and hotplug it when running (virtio only: SATA has no hotplug), under
        the run lock so two hotplugs never pick one port; a retry carries on where one stopped."""
        disk = self._resolve_disk(disk)
        run = self._run_folder(spec.id)
        with run.lock():
            if disk.role != "cdrom":
                pid = self._live_pid(run)
                self._require_disks_free(run, dataclasses.replace(spec, disks=(disk,)), pid)
            made = disk.role != "cdrom" and not run.disk_path(disk.name).exists()
            self._create_disk(run, disk)
            try:
                self._plug(run, disk)
            except Exception:
                if made:  # a disk file this plug made must not outlive it (nor fill the disk)
                    run.disk_path(disk.name).unlink(missing_ok=True)
                raise

    def _plug(self, run: RunFolder, disk: DiskSpec) -> None:
        """Hot-plug a disk whose file is made, unless its machine is stopped."""
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
            monitor.execute("blockdev-add", qcow2_node(disk, run.disk_path(disk.name)))
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
        self._require_iso(DiskSpec(name=disk_name, role="cdrom", bus="sata", source=iso))
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

    def _free_root_port(self, monitor: Monitor) -> str:
        for bus in monitor.execute("query-pci"):
            for device in bus["devices"]:
                bridge = device.get("pci_bridge")
                port = device.get("qdev_id", "")
                if bridge is not None and port.startswith("rp") and not bridge.get("devices"):
                    return str(port)
        raise BackendError("No free hotplug slot is left: stop the machine to attach more disks.")
