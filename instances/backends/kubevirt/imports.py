"""A machine's disk imports, CDI DataVolumes made from its VM's templates, as a start waits for
them. KubeVirt runs no VMI before each DataVolume has Succeeded; an importer's error (the
DataVolume Failed, or its Running condition False for reason Error, as KubeVirt's
DataVolumeError reads it) is the start's failure, in CDI's words. CDI keeps retrying a failed
import; the next start deletes it so that it imports again from the VM's fresh template."""

import math
import time
from typing import Any

from kubernetes import client, watch

from instances.backends.base import MachineSpec
from instances.backends.kubevirt.connection import refusal
from instances.backends.kubevirt.manifests import MACHINE_LABEL, MEDIUM_LABEL, data_volume_name
from instances.backends.kubevirt.objects import NamespaceObjects

Body = dict[str, Any]
CDI = ("cdi.kubevirt.io", "v1beta1")
ERROR_REASONS = ("Error", "ImagePullFailed")


def volume_names(spec: MachineSpec) -> set[str]:
    """The DataVolumes the machine's VM makes from its templates."""
    return {data_volume_name(spec.id, disk) for disk in spec.disks if disk.role != "container"}


def import_problem(volume: Body) -> str:
    """What stops the DataVolume's import, as CDI reports it; "" while it goes on or is done."""
    status = volume.get("status", {})
    running: Body = next(
        (c for c in status.get("conditions", []) if c.get("type") == "Running"), {}
    )
    failed = status.get("phase") == "Failed" or (
        running.get("status") == "False" and running.get("reason") in ERROR_REASONS
    )
    if not failed:
        return ""
    why = running.get("message") or running.get("reason") or "see its events"
    return f"The cluster could not import disk {volume['metadata']['name']}: {why}"


def _listed(objects: NamespaceObjects, machine_id: str) -> list[Body]:
    try:
        found = objects.custom.list_namespaced_custom_object(
            *CDI, objects.namespace, "datavolumes", label_selector=f"{MACHINE_LABEL}={machine_id}",
        )  # fmt: skip
    except Exception as error:
        raise refusal(error, objects.api.configuration.host) from None
    assert isinstance(found, dict)
    return list(found.get("items", []))


def forget_stale(spec: MachineSpec, objects: NamespaceObjects) -> None:
    """Deletes the machine's DataVolumes whose import failed: KubeVirt makes them again from the
    VM's templates, with the link the console wrote last. And those of media no longer in its
    CD-ROM drives (the machine is stopped: nothing reads them)."""
    wanted = volume_names(spec)
    for volume in _listed(objects, spec.id):
        meta = volume["metadata"]
        other_medium = MEDIUM_LABEL in meta.get("labels", {}) and meta["name"] not in wanted
        if not (other_medium or import_problem(volume)):
            continue
        try:
            objects.custom.delete_namespaced_custom_object(
                *CDI, objects.namespace, "datavolumes", meta["name"]
            )
        except client.ApiException as error:
            if error.status != 404:
                raise refusal(error, objects.api.configuration.host) from None


def await_imports(objects: NamespaceObjects, spec: MachineSpec, deadline: float) -> str:
    """Waits, through a watch, until each of the machine's DataVolumes has Succeeded: "" then,
    or once the deadline passes (the caller's wait says so); else the first import's problem."""
    wanted = volume_names(spec)
    done: set[str] = set()
    while wanted - done and (left := deadline - time.monotonic()) > 0:
        stream = watch.Watch().stream(
            objects.custom.list_namespaced_custom_object, *CDI, objects.namespace, "datavolumes",
            label_selector=f"{MACHINE_LABEL}={spec.id}", timeout_seconds=max(1, math.ceil(left)),
        )  # fmt: skip
        try:
            for event in stream:
                volume, name = event["object"], event["object"]["metadata"]["name"]
                if event["type"] == "DELETED" or name not in wanted:
                    done.discard(name)
                    continue
                if problem := import_problem(volume):
                    return problem
                if volume.get("status", {}).get("phase") == "Succeeded":
                    done.add(name)
                else:
                    done.discard(name)
                if not wanted - done:
                    return ""
        except Exception as error:  # the API's refusal, or the connection's
            raise refusal(error, objects.api.configuration.host) from None
    return ""
