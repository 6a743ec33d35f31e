"""KubeVirt's snapshot controller and its restore webhook, as far as the console depends on them.

A VirtualMachineSnapshot goes InProgress, then Succeeded and readyToUse with a
VirtualMachineSnapshotContent it owns; its volumes (DataVolumes and PVCs) are internal qcow2
snapshots of the node's disk files, taken by the node's QEMU backend, which freezes the guest
through its real agent when one runs (the indications say so). A VirtualMachineRestore brings
the disk files back to the snapshot in place; the webhook refuses one while the VM runs."""

import contextlib
import copy
from datetime import UTC, datetime
from typing import Any

from instances.backends.base import BackendError, DiskSpec, Power
from instances.backends.qemu import QemuBackend
from instances.backends.qemu.run_folder import disk_store
from tests.fakes.kubevirt.store import BY_KIND, ApiError, Body, Event, Resource

VM, VMI = BY_KIND["VirtualMachine"], BY_KIND["VirtualMachineInstance"]
SNAPSHOT = BY_KIND["VirtualMachineSnapshot"]
CONTENT = BY_KIND["VirtualMachineSnapshotContent"]
RESTORE = BY_KIND["VirtualMachineRestore"]
DATA_VOLUME = BY_KIND["DataVolume"]
DONE = "Operation complete"
INDICATIONS = {
    "Online": "Snapshot was taken while the VM was running",
    "GuestAgent": "The guest agent froze the guest's filesystems for the snapshot",
    "NoGuestAgent": "No guest agent froze the guest's filesystems: the snapshot is crash "
    "consistent",
}
WEBHOOK = "virtualmachinerestore-validator.snapshot.kubevirt.io"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(progressing: bool, ready: bool, reason: str) -> list[Body]:
    now = _now()
    return [
        {"type": "Progressing", "status": str(progressing), "reason": reason,
         "lastTransitionTime": now},
        {"type": "Ready", "status": str(ready), "reason": reason, "lastTransitionTime": now},
    ]  # fmt: skip


def _owner(body: Body) -> Body:
    meta = body["metadata"]
    return {
        "apiVersion": body["apiVersion"], "kind": body["kind"], "name": meta["name"],
        "uid": meta["uid"], "controller": True,
    }  # fmt: skip


class Snapshots:
    """Reconciles snapshots and restores on the controller's thread (it calls `reconcile`)."""

    def __init__(self, controller: Any) -> None:
        self.controller, self.store = controller, controller.store
        self.gone: list[Body] = []  # deleted contents whose disk snapshots are still there
        self.store.listeners.append(self._deleted)
        controller.api.admissions["VirtualMachineRestore"] = self._admit_restore

    def _deleted(self, event: Event) -> None:
        if event.type == "DELETED" and event.resource == CONTENT:
            self.gone.append(event.object)

    # ---- the webhook -------------------------------------------------------------------------
    def _admit_restore(self, namespace: str, body: Body) -> None:
        """As virt-api's admitter: the target must be a stopped VM, the snapshot ready."""
        target, name = body["spec"]["target"], body["metadata"].get("name", "")
        snapshot_name = body["spec"]["virtualMachineSnapshotName"]
        causes = []
        if (target.get("apiGroup"), target.get("kind")) != ("kubevirt.io", "VirtualMachine"):
            causes.append(("spec.target", "Target resource must be a kubevirt.io VirtualMachine"))
        else:
            vmi = self.store.find(VMI, namespace, target["name"])
            if vmi is not None and vmi.get("status", {}).get("phase") not in FINISHED:
                causes.append(("spec.target", f'VirtualMachine "{target["name"]}" is not stopped'))
        snapshot = self.store.find(SNAPSHOT, namespace, snapshot_name)
        if snapshot is None:
            causes.append(
                ("spec.virtualMachineSnapshotName",
                 f'VirtualMachineSnapshot "{snapshot_name}" does not exist')
            )  # fmt: skip
        elif not snapshot.get("status", {}).get("readyToUse"):
            causes.append(
                ("spec.virtualMachineSnapshotName",
                 f'VirtualMachineSnapshot "{snapshot_name}" is not ready to use')
            )  # fmt: skip
        if causes:
            raise ApiError(
                422, "Invalid", f'admission webhook "{WEBHOOK}" denied the request: {causes[0][1]}',
                {"name": name, "group": RESTORE.group, "kind": RESTORE.kind, "causes": [
                    {"reason": "FieldValueInvalid", "message": message, "field": field}
                    for field, message in causes
                ]},
            )  # fmt: skip

    # ---- the loop ----------------------------------------------------------------------------
    def reconcile(self) -> None:
        while self.gone:
            self._drop_disk_snapshots(self.gone.pop(0))
        for snapshot in self.store.list(SNAPSHOT, None, lambda body: True)[0]:
            phase = snapshot.get("status", {}).get("phase")
            if phase is None:
                self._begin(snapshot)
            elif phase == "InProgress":
                self._take(snapshot)
        for restore in self.store.list(RESTORE, None, lambda body: True)[0]:
            status = restore.get("status")
            if status is None:
                self._set(RESTORE, restore, {
                    "complete": False, "conditions": _conditions(True, False, "Restoring"),
                })  # fmt: skip
            elif not status.get("complete") and not _failed(status):
                self._restore(restore)

    def _set(self, resource: Resource, body: Body, status: Body) -> None:
        current = self.store.find(resource, body["metadata"]["namespace"], body["metadata"]["name"])
        if current is not None:
            current["status"] = status
            self.store.replace(resource, current["metadata"]["namespace"], current, status=True)

    # ---- where a VM's disks are --------------------------------------------------------------
    def _machine(self, namespace: str, vm_name: str) -> tuple[str, QemuBackend | None, bool]:
        """The VM's machine id on its node, the node holding its disks, and whether it runs."""
        machine_id = f"{namespace}-{vm_name}"[:40]
        vmi = self.store.find(VMI, namespace, vm_name)
        node = (vmi or {}).get("status", {}).get("nodeName")
        if node is not None:
            backend = self.controller.node_backend(node)
            return machine_id, backend, backend.status(machine_id).power is Power.RUNNING
        vm = self.store.find(VM, namespace, vm_name) or {"spec": {}}
        names = [volume for volume, _ in _persistent_volumes(vm)]
        for backend in self.controller.nodes.values():
            if any((disk_store(backend.root) / f"{name}.qcow2").is_file() for name in names):
                return machine_id, backend, False
        return machine_id, None, False

    # ---- snapshots ---------------------------------------------------------------------------
    def _begin(self, snapshot: Body) -> None:
        namespace, source = snapshot["metadata"]["namespace"], snapshot["spec"]["source"]
        vm = self.store.find(VM, namespace, source.get("name", ""))
        status: Body = {"phase": "InProgress", "readyToUse": False,
                        "conditions": _conditions(True, False, "Source locked and operation in progress")}  # fmt: skip
        if vm is None or source.get("kind") != "VirtualMachine":
            status.update(phase="Failed", conditions=_conditions(False, False, "Failed"))
            status["error"] = {"message": f'VirtualMachine "{source.get("name")}" does not exist',
                               "time": _now()}  # fmt: skip
        else:
            status["sourceUID"] = vm["metadata"]["uid"]
        self._set(SNAPSHOT, snapshot, status)

    def _take(self, snapshot: Body) -> None:
        """The VM's persistent volumes snapshotted together, and the content that holds them."""
        namespace, meta = snapshot["metadata"]["namespace"], snapshot["metadata"]
        vm = self.store.find(VM, namespace, snapshot["spec"]["source"]["name"])
        status = copy.deepcopy(snapshot["status"])
        if vm is None:
            return self._fail(snapshot, "the VirtualMachine was deleted during the snapshot")
        volumes = _persistent_volumes(vm)
        tag = f"vmsnapshot-{meta['uid']}"
        machine_id, node, running = self._machine(namespace, vm["metadata"]["name"])
        frozen = False
        try:
            if node is not None and running:
                disks = [DiskSpec(name=name, role="secondary", bus="virtio") for name, _ in volumes]
                frozen = node.snapshot_disks(machine_id, disks, tag)
            elif node is not None:
                for name, _ in volumes:
                    path = disk_store(node.root) / f"{name}.qcow2"
                    if path.is_file() and tag not in node.qemu_img.snapshots(path):
                        node.qemu_img.snapshot(path, tag)
        except BackendError as error:
            return self._fail(snapshot, error.message)
        content_name = f"vmsnapshot-content-{meta['uid']}"
        now = _now()
        content = {
            "metadata": {"name": content_name, "ownerReferences": [_owner(snapshot)]},
            "spec": {
                "source": {"virtualMachine": {
                    "metadata": {"name": vm["metadata"]["name"], "namespace": namespace,
                                 "labels": vm["metadata"].get("labels", {})},
                    "spec": vm["spec"],
                }},
                "virtualMachineSnapshotName": meta["name"],
                "volumeBackups": [
                    {"volumeName": name, "volumeSnapshotName": f"{tag}-volume-{name}",
                     "persistentVolumeClaim": {"metadata": {"name": claim},
                                               "spec": self._claim_spec(namespace, claim)}}
                    for name, claim in volumes
                ],
            },
        }  # fmt: skip
        with contextlib.suppress(ApiError):  # made by an earlier pass
            made = self.store.create(CONTENT, namespace, content)
            made["status"] = {"readyToUse": True, "creationTime": now, "volumeSnapshotStatus": [
                {"volumeSnapshotName": f"{tag}-volume-{name}", "readyToUse": True,
                 "creationTime": now} for name, _ in volumes
            ]}  # fmt: skip
            self.store.replace(CONTENT, namespace, made, status=True)
        indications = (["Online", "GuestAgent" if frozen else "NoGuestAgent"]) if running else []
        included = {name for name, _ in volumes}
        status.update(
            phase="Succeeded", readyToUse=True, creationTime=now,
            virtualMachineSnapshotContentName=content_name, indications=indications,
            sourceIndications=[{"indication": i, "message": INDICATIONS[i]} for i in indications],
            snapshotVolumes={
                "includedVolumes": sorted(included),
                "excludedVolumes": sorted(
                    v["name"] for v in vm["spec"]["template"]["spec"].get("volumes", [])
                    if v["name"] not in included
                ),
            },
            conditions=_conditions(False, True, DONE),
        )  # fmt: skip
        self._set(SNAPSHOT, snapshot, status)
        return None

    def _claim_spec(self, namespace: str, claim: str) -> Body:
        data_volume = self.store.find(DATA_VOLUME, namespace, claim) or {}
        storage = data_volume.get("spec", {}).get("storage", {})
        resources = storage.get("resources", {"requests": {"storage": "1Gi"}})
        return {"accessModes": storage.get("accessModes", ["ReadWriteOnce"]),
                "resources": resources}  # fmt: skip

    def _fail(self, snapshot: Body, message: str) -> None:
        status = copy.deepcopy(snapshot["status"])
        status.update(
            phase="Failed", readyToUse=False, error={"message": message, "time": _now()},
            conditions=_conditions(False, False, "Failed"),
        )  # fmt: skip
        self._set(SNAPSHOT, snapshot, status)

    def _drop_disk_snapshots(self, content: Body) -> None:
        """A deleted content's volume snapshots go from the disk files that hold them."""
        namespace = content["metadata"]["namespace"]
        vm_name = content["spec"]["source"]["virtualMachine"]["metadata"]["name"]
        machine_id, node, _ = self._machine(namespace, vm_name)
        if node is None:
            return
        for backup in content["spec"].get("volumeBackups", []):
            tag = backup["volumeSnapshotName"].rsplit("-volume-", 1)[0]
            if (disk_store(node.root) / f"{backup['volumeName']}.qcow2").is_file():
                with contextlib.suppress(BackendError):  # the disk went meanwhile
                    node.delete_snapshot(machine_id, backup["volumeName"], tag)

    # ---- restores ----------------------------------------------------------------------------
    def _restore(self, restore: Body) -> None:
        namespace, spec = restore["metadata"]["namespace"], restore["spec"]
        snapshot = self.store.find(SNAPSHOT, namespace, spec["virtualMachineSnapshotName"])
        content_name = (snapshot or {}).get("status", {}).get("virtualMachineSnapshotContentName")
        content = self.store.find(CONTENT, namespace, content_name or "")
        status = copy.deepcopy(restore["status"])
        machine_id, node, running = self._machine(namespace, spec["target"]["name"])
        problem = ""
        if content is None:
            problem = f'VirtualMachineSnapshot "{spec["virtualMachineSnapshotName"]}" is gone'
        elif running:
            problem = "the target VirtualMachine is not stopped"
        restores = []
        for backup in [] if problem else content["spec"].get("volumeBackups", []):
            tag = backup["volumeSnapshotName"].rsplit("-volume-", 1)[0]
            claim = backup["persistentVolumeClaim"]["metadata"]["name"]
            if (
                node is not None
                and (disk_store(node.root) / f"{backup['volumeName']}.qcow2").is_file()
            ):
                try:
                    node.revert_snapshot(machine_id, backup["volumeName"], tag)
                except BackendError as error:
                    problem = error.message
                    break
            restores.append({
                "volumeName": backup["volumeName"], "persistentVolumeClaim": claim,
                "volumeSnapshotName": backup["volumeSnapshotName"], "dataVolumeName": claim,
            })  # fmt: skip
        if problem:
            status["conditions"] = [
                {"type": "Progressing", "status": "False", "reason": problem},
                {"type": "Ready", "status": "False", "reason": problem},
                {"type": "Failure", "status": "True", "reason": problem, "message": problem},
            ]  # fmt: skip
        else:
            status.update(complete=True, restoreTime=_now(), restores=restores,
                          conditions=_conditions(False, True, DONE))  # fmt: skip
        self._set(RESTORE, restore, status)


FINISHED = ("Succeeded", "Failed")


def _persistent_volumes(vm: Body) -> list[tuple[str, str]]:
    """The VM's volumes a snapshot holds (DataVolumes and PVCs), and their claims' names."""
    found = []
    for volume in vm["spec"].get("template", {}).get("spec", {}).get("volumes", []):
        if "dataVolume" in volume:
            found.append((volume["name"], volume["dataVolume"]["name"]))
        elif "persistentVolumeClaim" in volume:
            found.append((volume["name"], volume["persistentVolumeClaim"]["claimName"]))
    return found


def _failed(status: Body) -> bool:
    return any(
        c.get("type") == "Failure" and c.get("status") == "True"
        for c in status.get("conditions", [])
    )
