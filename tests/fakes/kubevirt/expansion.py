"""Volume expansion as a cluster does it: a claim that asks for more storage than it has is
grown by its storage class's resizer (status.capacity follows spec.resources.requests), then
KubeVirt's ExpandDisks grows the disk of a running guest that uses it (here the node's QEMU
backend's resize_disk: the image, then block_resize). A stopped guest gets it at its start."""

import logging
from typing import Any

from kubernetes.utils import parse_quantity

from instances.backends.base import BackendError
from tests.fakes.kubevirt.store import BY_KIND, Body

VMI, PVC = BY_KIND["VirtualMachineInstance"], BY_KIND["PersistentVolumeClaim"]
log = logging.getLogger(__name__)


def claim_of(volume: Body) -> str:
    """The claim a VMI volume reads: a DataVolume's is of its name."""
    if "dataVolume" in volume:
        return str(volume["dataVolume"]["name"])
    return str(volume.get("persistentVolumeClaim", {}).get("claimName", ""))


class Expansion:
    """The resizer and KubeVirt's part of a claim's growth."""

    def __init__(self, controller: Any) -> None:
        self.controller, self.store = controller, controller.store

    def capacity(self, namespace: str, claim: str) -> str | None:
        """What the claim holds now; None when there is no such claim."""
        found = self.store.find(PVC, namespace, claim)
        return None if found is None else found.get("status", {}).get("capacity", {}).get("storage")

    def reconcile(self) -> None:
        claims, _ = self.store.list(PVC, None, lambda body: True)
        for claim in claims:
            wanted = claim["spec"].get("resources", {}).get("requests", {}).get("storage")
            has = claim.get("status", {}).get("capacity", {}).get("storage")
            if not (wanted and has) or parse_quantity(has) >= parse_quantity(wanted):
                continue  # not bound yet, or as large as asked
            namespace, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
            status = claim.setdefault("status", {})
            status["capacity"] = {**status.get("capacity", {}), "storage": wanted}
            self.store.replace(PVC, namespace, claim, status=True)
            self._grow_guests(namespace, name)

    def _grow_guests(self, namespace: str, claim: str) -> None:
        vmis, _ = self.store.list(VMI, namespace, lambda body: True)
        for vmi in vmis:
            if vmi.get("status", {}).get("phase") != "Running":
                continue
            names = {v["name"] for v in vmi["spec"].get("volumes", []) if claim_of(v) == claim}
            if not names:
                continue
            node = self.controller.node_backend(vmi["status"]["nodeName"])
            spec = self.controller.machine_for(vmi)
            for disk in spec.disks:
                if disk.name in names:
                    try:
                        node.resize_disk(spec, disk)
                    except BackendError as error:  # virt-handler logs it; the guest keeps its size
                        log.warning("expanding %s: %s", disk.name, error.message)
