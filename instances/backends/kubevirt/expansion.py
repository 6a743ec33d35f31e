"""Growing a KubeVirt machine's disk as a cluster grows one: the disk's PersistentVolumeClaim
asks for more storage, the storage class's resizer grows the volume, and KubeVirt (its
ExpandDisks feature) grows the disk image and tells a running guest."""

import math
import time

from kubernetes import watch
from kubernetes.utils import parse_quantity

from instances.backends.base import BackendError, DiskSpec
from instances.backends.kubevirt.connection import refusal
from instances.backends.kubevirt.manifests import data_volume_name
from instances.backends.kubevirt.objects import NamespaceObjects

GIB = 1024**3
RESIZE_TIMEOUT = 120.0  # the storage class's resizer, then KubeVirt's


def resize_disk(objects: NamespaceObjects, machine_id: str, disk: DiskSpec) -> None:
    """Ask the disk's claim for disk.size_gb and wait until the volume has it. A disk whose
    volume is not made yet gets the new size when the VM is written at its next start."""
    name = data_volume_name(machine_id, disk)
    body = {"spec": {"resources": {"requests": {"storage": f"{disk.size_gb}Gi"}}}}
    patched = objects._calling(
        objects.core.patch_namespaced_persistent_volume_claim, name, objects.namespace, body
    )
    if patched == 404:
        return
    wanted, deadline = disk.size_gb * GIB, time.monotonic() + RESIZE_TIMEOUT
    while (left := deadline - time.monotonic()) > 0:
        try:
            for event in watch.Watch().stream(
                objects.core.list_namespaced_persistent_volume_claim, objects.namespace,
                field_selector=f"metadata.name={name}", timeout_seconds=max(1, math.ceil(left)),
            ):  # fmt: skip
                claim = event["object"].to_dict()
                capacity = ((claim.get("status") or {}).get("capacity") or {}).get("storage")
                if capacity and parse_quantity(capacity) >= wanted:
                    return
        except Exception as error:
            raise refusal(error, objects.api.configuration.host) from None
    raise BackendError(
        f"The cluster did not grow the volume of {disk.name} within {RESIZE_TIMEOUT:.0f} s: "
        "its storage class may not allow volume expansion (allowVolumeExpansion), or KubeVirt's "
        "ExpandDisks feature gate is off.",
        retryable=True,
    )
