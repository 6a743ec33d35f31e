"""Snapshots of a KubeVirt machine: a VirtualMachineSnapshot (KubeVirt freezes the guest through
its agent) and a VirtualMachineRestore in place to revert.

KubeVirt snapshots and restores a VM whole, where the console snapshots disks: one snapshot
name taken on some disks together is one VirtualMachineSnapshot, labelled with the name and
annotated with those disks. Deleting it from a disk takes the disk off; the last one deletes
it. A revert restores every disk it was taken for, so one taken for fewer disks than it holds
is refused rather than bringing back a disk the user did not snapshot."""

import hashlib
import time
import uuid
from collections.abc import Sequence
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from instances.backends.base import BackendError, DiskSpec
from instances.backends.kubevirt.manifests import MACHINE_LABEL, MANAGED_BY
from instances.backends.kubevirt.objects import NamespaceObjects

Body = dict[str, Any]
SNAPSHOTS = ("snapshot.kubevirt.io", "v1beta1")
SNAPSHOT_LABEL = "zopday.io/snapshot"  # the console's snapshot name
DISKS_ANNOTATION = "zopday.io/disks"  # the console's disks it is kept for, comma-separated
SNAPSHOT_TIMEOUT = 300.0  # KubeVirt's own failure deadline of a snapshot
RESTORE_TIMEOUT = 300.0
POLL_SECONDS = 0.5
GIB = 1024**3


class VmSnapshots:
    """The snapshots and restores of one machine's VirtualMachine."""

    def __init__(self, objects: NamespaceObjects, machine_id: str) -> None:
        self.objects, self.machine_id = objects, machine_id

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        call = getattr(self.objects.custom, f"{method}_namespaced_custom_object")
        return self.objects._calling(call, *SNAPSHOTS, self.objects.namespace, *args, **kwargs)

    def _get(self, plural: str, name: str) -> Body | None:
        found = self._call("get", plural, name)
        return None if found == 404 else found

    # ---- take -------------------------------------------------------------------------------
    def take(self, disks: Sequence[DiskSpec], snapshot_name: str) -> bool:
        """A VirtualMachineSnapshot for the disks, ready to use; whether the guest agent froze
        the filesystems for it. A failed one from an earlier try is deleted and taken anew."""
        disk_names = sorted(disk.name for disk in disks)
        digest = hashlib.sha256(",".join(disk_names).encode()).hexdigest()[:8]
        name = f"{self.machine_id}-{snapshot_name}-{digest}"
        body = {
            "apiVersion": "/".join(SNAPSHOTS), "kind": "VirtualMachineSnapshot",
            "metadata": {
                "name": name,
                "labels": {**MANAGED_BY, MACHINE_LABEL: self.machine_id,
                           SNAPSHOT_LABEL: snapshot_name},
                "annotations": {DISKS_ANNOTATION: ",".join(disk_names)},
            },
            "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine",
                                "name": self.machine_id}},
        }  # fmt: skip
        existing = self._get("virtualmachinesnapshots", name)
        if existing is not None and existing.get("status", {}).get("phase") == "Failed":
            self._call("delete", "virtualmachinesnapshots", name)
            self._wait_gone(name)
            existing = None
        made = (
            None
            if existing
            else self._call("create", "virtualmachinesnapshots", body, field_validation="Strict")
        )
        if made == 404:  # its namespace is not there: nor is the VM
            raise BackendError(f"The cluster has no VirtualMachine {self.machine_id} to snapshot.")
        deadline = time.monotonic() + SNAPSHOT_TIMEOUT
        while time.monotonic() < deadline:
            found = self._get("virtualmachinesnapshots", name)
            if found is None:
                raise BackendError("The snapshot was deleted on the cluster before it was ready.")
            status = found.get("status", {})
            if status.get("readyToUse"):
                return consistent(status)
            if status.get("phase") == "Failed" or status.get("error"):
                said = status.get("error", {}).get("message") or "see its events"
                raise BackendError(f"The cluster could not take the snapshot: {said}.")
            time.sleep(POLL_SECONDS)
        raise BackendError(
            f"The cluster did not finish the snapshot within {SNAPSHOT_TIMEOUT:.0f} s.",
            retryable=True,
        )

    def _wait_gone(self, name: str) -> None:
        deadline = time.monotonic() + 30
        while self._get("virtualmachinesnapshots", name) is not None:
            if time.monotonic() > deadline:
                raise BackendError(f"The cluster did not delete {name}.", retryable=True)
            time.sleep(POLL_SECONDS)

    def _held(self, disk_name: str, snapshot_name: str) -> Body | None:
        """The machine's VirtualMachineSnapshot of that name that is kept for the disk."""
        selector = f"{MACHINE_LABEL}={self.machine_id},{SNAPSHOT_LABEL}={snapshot_name}"
        found = self._call("list", "virtualmachinesnapshots", label_selector=selector)
        for snapshot in found.get("items", []):
            if disk_name in kept_for(snapshot):
                return dict(snapshot)
        return None

    # ---- delete ------------------------------------------------------------------------------
    def delete(self, disk_name: str, snapshot_name: str) -> None:
        """The disk no longer keeps it; the last disk deletes it (KubeVirt takes its content)."""
        snapshot = self._held(disk_name, snapshot_name)
        if snapshot is None:
            return
        others = [name for name in kept_for(snapshot) if name != disk_name]
        name = snapshot["metadata"]["name"]
        if not others:
            self._call("delete", "virtualmachinesnapshots", name)
            return
        patch = {"metadata": {"annotations": {DISKS_ANNOTATION: ",".join(others)}}}
        self._call("patch", "virtualmachinesnapshots", name, patch)

    # ---- revert ------------------------------------------------------------------------------
    def revert(self, disk_name: str, snapshot_name: str) -> int:
        """A VirtualMachineRestore in place of the stopped VM, waited for; the disk's size in
        GB as the snapshot holds it."""
        vmi = self.objects.virtual_machine_instance(self.machine_id)
        if vmi is not None and vmi.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            raise BackendError(
                "Stop the instance before reverting a disk to a snapshot: KubeVirt restores "
                "only a stopped VirtualMachine."
            )
        snapshot = self._held(disk_name, snapshot_name)
        if snapshot is None or not snapshot.get("status", {}).get("readyToUse"):
            raise BackendError(f"{disk_name} has no snapshot called {snapshot_name} ready.")
        held = snapshot["status"].get("snapshotVolumes", {}).get("includedVolumes", [])
        if disk_name not in held:
            raise BackendError(f"KubeVirt could not snapshot {disk_name}: its volume is not kept.")
        if extra := sorted(set(held) - set(kept_for(snapshot))):
            raise BackendError(
                f"KubeVirt restores a VM's disks together, and this snapshot also holds "
                f"{', '.join(extra)}, which it would bring back too. Revert from a snapshot "
                "of the whole instance instead."
            )
        name = f"{snapshot['metadata']['name'][:40]}-{uuid.uuid4().hex[:8]}"
        self._call("create", "virtualmachinerestores", {
            "apiVersion": "/".join(SNAPSHOTS), "kind": "VirtualMachineRestore",
            "metadata": {"name": name, "labels": {**MANAGED_BY, MACHINE_LABEL: self.machine_id}},
            "spec": {
                "target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine",
                           "name": self.machine_id},
                "virtualMachineSnapshotName": snapshot["metadata"]["name"],
                "volumeRestorePolicy": "InPlace",  # the console's VM keeps naming its volumes
                "targetReadinessPolicy": "FailImmediate",
            },
        }, field_validation="Strict")  # fmt: skip
        try:
            self._wait_restored(name)
        finally:  # one-shot: nothing to keep of it
            self._call("delete", "virtualmachinerestores", name)
        return self._size_gb(snapshot, disk_name)

    def _wait_restored(self, name: str) -> None:
        deadline = time.monotonic() + RESTORE_TIMEOUT
        while time.monotonic() < deadline:
            status = (self._get("virtualmachinerestores", name) or {}).get("status", {})
            if status.get("complete"):
                return
            for condition in status.get("conditions", []):
                if condition.get("type") == "Failure" and condition.get("status") == "True":
                    said = condition.get("message") or condition.get("reason") or "see its events"
                    raise BackendError(f"The cluster could not restore the snapshot: {said}.")
            time.sleep(POLL_SECONDS)
        raise BackendError(
            f"The cluster did not finish the restore within {RESTORE_TIMEOUT:.0f} s.",
            retryable=True,
        )

    def _size_gb(self, snapshot: Body, disk_name: str) -> int:
        """The size the snapshot's content gives the disk's claim."""
        content_name = snapshot["status"].get("virtualMachineSnapshotContentName", "")
        content = self._get("virtualmachinesnapshotcontents", content_name) or {}
        for backup in content.get("spec", {}).get("volumeBackups", []):
            if backup.get("volumeName") == disk_name:
                requests = backup["persistentVolumeClaim"].get("spec", {}).get("resources", {})
                storage = requests.get("requests", {}).get("storage", "0")
                return int(parse_quantity(storage) // GIB)
        return 0


def kept_for(snapshot: Body) -> list[str]:
    """The console's disks a VirtualMachineSnapshot is kept for."""
    annotations = snapshot.get("metadata", {}).get("annotations") or {}
    return [name for name in annotations.get(DISKS_ANNOTATION, "").split(",") if name]


def consistent(status: Body) -> bool:
    """The guest agent froze the filesystems for it (KubeVirt's GuestAgent indication)."""
    said = set(status.get("indications") or [])
    said |= {entry.get("indication") for entry in status.get("sourceIndications") or []}
    return "GuestAgent" in said
