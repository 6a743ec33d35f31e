"""Internal qcow2 snapshots of a QEMU machine's disks, frozen through the guest agent if it can."""

from collections.abc import Sequence

from instances.backends.base import BackendError, DiskSpec, Power
from instances.holds import hold_point

from .agent import GuestAgent
from .cmdline import node_name
from .images import GIB
from .qmp import Monitor
from .runs import QemuRuns

FSFREEZE_TIMEOUT = 60.0  # flushing a busy guest's writes before the freeze takes a while
SNAPSHOT_TIMEOUT = 60.0  # an internal snapshot of a large disk writes its metadata


class QemuSnapshots(QemuRuns):
    """Snapshots taken, deleted and reverted: by qemu-img when stopped, by QEMU when running."""

    def snapshot_disks(
        self, machine_id: str, disks: Sequence[DiskSpec], snapshot_name: str
    ) -> bool:
        """Snapshot the disks under one name: when running, in one QMP transaction inside a
        guest fsfreeze if it has an agent; whether it was frozen. Safe to retry (snapshots taken
        count, a freeze left behind is thawed); one at a time per machine, so thaws never mix."""
        run = self._run_folder(machine_id)
        disk_names = [disk.name for disk in disks]
        with run.lock():  # a start waits for qemu-img
            if self._settle(run).power is Power.STOPPED:
                for disk in disks:  # a never-started machine's disks: made as a start would
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
