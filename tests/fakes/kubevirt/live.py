"""Changes to a running VM that KubeVirt applies live: an interface's `state` (KubeVirt 1.5+:
virt-controller carries it from the VM to its VMI, virt-handler sets the link, status.interfaces
says linkState), and hotplugged volumes (the VM's addvolume and removevolume subresources
change the VM's spec; virt-controller carries hotpluggable volumes to the VMI; virt-handler
plugs them into the guest and reports status.volumeStatus). Here virt-handler's part is done
to the node's real QEMU guest: `set_link`, `device_add`, `device_del`."""

import copy
import uuid
from typing import Any

from instances.backends.base import BackendError, DiskSpec
from tests.fakes.kubevirt.store import BY_KIND, ApiError, Body

VM, VMI = BY_KIND["VirtualMachine"], BY_KIND["VirtualMachineInstance"]
DATA_VOLUME, PVC = BY_KIND["DataVolume"], BY_KIND["PersistentVolumeClaim"]


def hotpluggable(volume: Body) -> bool:
    source = volume.get("dataVolume") or volume.get("persistentVolumeClaim") or {}
    return bool(source.get("hotpluggable"))


def _gib(quantity: str) -> int:
    for suffix, factor in (("Mi", 1 / 1024), ("Gi", 1), ("Ti", 1024)):
        if quantity.endswith(suffix):
            return max(1, int(float(quantity[: -len(suffix)]) * factor))
    return max(1, int(float(quantity)) // 1024**3)


class LiveUpdates:
    """virt-controller's and virt-handler's live updates of running VMIs."""

    def __init__(self, controller: Any) -> None:
        self.controller, self.store = controller, controller.store
        controller.api.actions[("virtualmachines", "addvolume")] = self.add_volume
        controller.api.actions[("virtualmachines", "removevolume")] = self.remove_volume

    # ---- virt-api: the VM's subresources ---------------------------------------------------
    def add_volume(self, namespace: str, name: str, body: Body) -> None:
        """v1.AddVolumeOptions: the disk and its volume join the VM's template."""
        with self.controller.lock:
            vm = self.store.get(VM, namespace, name)
            spec = vm["spec"]["template"]["spec"]
            volume_name = body["name"]
            volumes = spec.setdefault("volumes", [])
            disks = spec["domain"]["devices"].setdefault("disks", [])
            if any(item["name"] == volume_name for item in [*volumes, *disks]):
                raise ApiError(
                    409, "Conflict", f"Unable to add volume [{volume_name}] because volume with "
                    "that name already exists",
                )  # fmt: skip
            source = body["volumeSource"]
            if len(source) != 1 or not hotpluggable(source):
                raise ApiError(
                    400, "BadRequest", "AddVolumeOptions need one hotpluggable dataVolume or "
                    "persistentVolumeClaim volume source",
                )  # fmt: skip
            disks.append({**copy.deepcopy(body["disk"]), "name": volume_name})
            volumes.append({"name": volume_name, **copy.deepcopy(source)})
            if not body.get("dryRun"):
                self.store.replace(VM, namespace, vm, status=False)
        self.controller._wake()

    def remove_volume(self, namespace: str, name: str, body: Body) -> None:
        """v1.RemoveVolumeOptions: a hotplugged volume and its disk leave the VM's template."""
        with self.controller.lock:
            vm = self.store.get(VM, namespace, name)
            spec = vm["spec"]["template"]["spec"]
            volume_name = body["name"]
            volume = next((v for v in spec.get("volumes", []) if v["name"] == volume_name), None)
            if volume is None:
                raise ApiError(
                    404, "NotFound", f"Unable to remove volume [{volume_name}] because it does "
                    "not exist",
                )  # fmt: skip
            if not hotpluggable(volume):
                raise ApiError(
                    400, "BadRequest", f"Unable to remove volume [{volume_name}] because it is "
                    "not hotpluggable",
                )  # fmt: skip
            spec["volumes"].remove(volume)
            devices = spec["domain"]["devices"]
            devices["disks"] = [d for d in devices.get("disks", []) if d["name"] != volume_name]
            if not body.get("dryRun"):
                self.store.replace(VM, namespace, vm, status=False)
        self.controller._wake()

    # ---- virt-controller: the VM's live fields to its VMI ---------------------------------
    def propagate(self, vm: Body) -> None:
        namespace, name = vm["metadata"]["namespace"], vm["metadata"]["name"]
        vmi = self.store.find(VMI, namespace, name)
        if vmi is None or vmi.get("status", {}).get("phase") != "Running":
            return
        wanted, spec = vm["spec"]["template"]["spec"], vmi["spec"]
        states = {
            interface["name"]: interface.get("state")
            for interface in wanted["domain"]["devices"].get("interfaces", [])
        }
        for interface in spec["domain"]["devices"].get("interfaces", []):
            if states.get(interface["name"]):
                interface["state"] = states[interface["name"]]
            else:
                interface.pop("state", None)
        plugged = [v for v in wanted.get("volumes", []) if hotpluggable(v)]
        kept = [v for v in spec.get("volumes", []) if not hotpluggable(v)]
        spec["volumes"] = kept + plugged
        named = {volume["name"] for volume in spec["volumes"]}
        devices = spec["domain"]["devices"]
        disks = [d for d in devices.get("disks", []) if d["name"] in named]
        present = {disk["name"] for disk in disks}
        disks += [
            disk
            for disk in wanted["domain"]["devices"].get("disks", [])
            if disk["name"] in {v["name"] for v in plugged} - present
        ]
        devices["disks"] = disks
        self.store.replace(VMI, namespace, vmi, status=False)  # a no-op when nothing changed

    # ---- virt-handler: the VMI's spec to the node's guest ---------------------------------
    def apply(self, vmi: Body, status: Body) -> bool:
        """Links and hotplugged volumes of the running guest as the VMI's spec says; whether
        anything changed."""
        backend = self.controller.node_backend(status["nodeName"])
        machine_id = self.controller._machine_id(vmi)
        changed = False
        links = backend.status(machine_id).links
        for interface in vmi["spec"]["domain"]["devices"].get("interfaces", []):
            up = interface.get("state") != "down"
            if interface["name"] in links and links[interface["name"]] != up:
                changed |= backend.set_link(machine_id, interface["name"], up)
        volumes = {volume["name"]: volume for volume in vmi["spec"].get("volumes", [])}
        statuses = {entry["name"]: entry for entry in status.get("volumeStatus", [])}
        for name, entry in list(statuses.items()):
            if "hotplugVolume" in entry and name not in volumes:
                try:
                    backend.detach_disk(machine_id, name)
                except BackendError as error:  # the guest has not let go yet: asked again
                    entry.update(phase="Detaching", message=error.message)
                    continue
                del statuses[name]
                changed = True
        targets = _targets(vmi)
        for name, volume in volumes.items():
            if name in statuses and statuses[name].get("phase") in ("Ready", "Failed"):
                continue
            if not hotpluggable(volume):
                statuses[name] = {"name": name, "target": targets.get(name, "")}
                continue
            entry = self._plug(vmi, volume, targets.get(name, ""))
            changed |= entry.get("phase") == "Ready"
            statuses[name] = entry
        status["volumeStatus"] = list(statuses.values())
        return changed

    def _plug(self, vmi: Body, volume: Body, target: str) -> Body:
        namespace, name = vmi["metadata"]["namespace"], volume["name"]
        claim, size = self._claim(namespace, volume)
        entry: Body = {"name": name, "target": target, "hotplugVolume": {}}
        if not claim:
            return {**entry, "phase": "Pending", "reason": "PVCNotReady",
                    "message": f"Waiting for the volume of {name} to be ready"}  # fmt: skip
        disk = next(d for d in vmi["spec"]["domain"]["devices"]["disks"] if d["name"] == name)
        spec = DiskSpec(
            name=name, role="secondary", bus="virtio", size_gb=_gib(size),
            serial=disk.get("serial", ""),
        )  # fmt: skip
        backend = self.controller.node_backend(vmi["status"]["nodeName"])
        try:
            backend.attach_disk(self.controller.machine_for(vmi), spec)
        except BackendError as error:
            return {**entry, "phase": "Failed", "reason": "AttachFailed", "message": error.message}
        attach_pod = f"hp-volume-{uuid.uuid4().hex[:5]}"
        return {
            **entry, "phase": "Ready", "reason": "VolumeReady",
            "message": f"Successfully attach hotplugged volume {name} to VM",
            "hotplugVolume": {"attachPodName": attach_pod, "attachPodUID": str(uuid.uuid4())},
            "persistentVolumeClaimInfo": {
                "claimName": claim, "capacity": {"storage": size},
                "requests": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                "volumeMode": "Filesystem", "filesystemOverhead": "0.055",
            },
        }  # fmt: skip

    def _claim(self, namespace: str, volume: Body) -> tuple[str, str]:
        """The claim behind a hotplugged volume once it can be attached, and its size."""
        if "dataVolume" in volume:
            claim = volume["dataVolume"]["name"]
            data_volume = self.store.find(DATA_VOLUME, namespace, claim)
            if data_volume is None or data_volume.get("status", {}).get("phase") != "Succeeded":
                return "", ""
            storage = data_volume["spec"].get("storage") or data_volume["spec"].get("pvc", {})
        else:
            claim = volume["persistentVolumeClaim"]["claimName"]
            pvc = self.store.find(PVC, namespace, claim)
            if pvc is None:
                return "", ""
            storage = pvc.get("spec", {})
        return claim, storage.get("resources", {}).get("requests", {}).get("storage", "1Gi")


def _targets(vmi: Body) -> dict[str, str]:
    """The target each disk has in the domain: vda, vdb... for virtio, sda... for the rest."""
    counts = {"vd": 0, "sd": 0}
    targets = {}
    for disk in vmi["spec"]["domain"]["devices"].get("disks", []):
        bus = (disk.get("disk") or disk.get("cdrom") or disk.get("lun") or {}).get("bus")
        prefix = "vd" if bus in (None, "virtio") else "sd"
        targets[disk["name"]] = prefix + chr(ord("a") + counts[prefix])
        counts[prefix] += 1
    return targets
