"""The fake API server's objects, as etcd and the API server keep them: one resourceVersion
counter for everything, a stale update refused, every change an event that watches receive,
and only the latest `history` events kept (an older resourceVersion is 410 Gone)."""

import copy
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Body = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    """A kind as the API serves it: /api/v1 or /apis/<group>/<version>, then its plural."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How messages name it: virtualmachines.kubevirt.io, or secrets."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES = (
    Resource("", "v1", "namespaces", "Namespace", namespaced=False),
    Resource("", "v1", "nodes", "Node", namespaced=False),
    Resource("", "v1", "secrets", "Secret"),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
    Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    Resource("kubevirt.io", "v1", "virtualmachines", "VirtualMachine"),
    Resource("kubevirt.io", "v1", "virtualmachineinstances", "VirtualMachineInstance"),
    Resource(
        "kubevirt.io", "v1", "virtualmachineinstancemigrations", "VirtualMachineInstanceMigration"
    ),
    Resource(
        "snapshot.kubevirt.io", "v1beta1", "virtualmachinesnapshots", "VirtualMachineSnapshot"
    ),
    Resource("snapshot.kubevirt.io", "v1beta1", "virtualmachinerestores", "VirtualMachineRestore"),
    Resource(
        "snapshot.kubevirt.io",
        "v1beta1",
        "virtualmachinesnapshotcontents",
        "VirtualMachineSnapshotContent",
    ),
    Resource("cdi.kubevirt.io", "v1beta1", "datavolumes", "DataVolume"),
    Resource(
        "k8s.cni.cncf.io", "v1", "network-attachment-definitions", "NetworkAttachmentDefinition"
    ),
)
BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}
BY_KIND = {r.kind: r for r in RESOURCES}


class ApiError(Exception):
    """An answer other than success, as a Kubernetes Status."""

    def __init__(self, code: int, reason: str, message: str, details: Body | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> Body:
        body: Body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def not_found(resource: Resource, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{resource.qualified} "{name}" not found',
        {"name": name, "group": resource.group, "kind": resource.plural},
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Event:
    type: str  # ADDED, MODIFIED, DELETED
    resource: Resource
    object: Body
    version: int


Key = tuple[Resource, str, str]  # resource, namespace ("" when cluster-scoped), name


class Store:
    """Objects by (resource, namespace, name), thread-safe; `changed` wakes the watches."""

    def __init__(self, history: int = 1000) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.objects: dict[Key, Body] = {}
        self.events: deque[Event] = deque(maxlen=history)
        self.version = 1
        self.floor = 0  # events up to this version are no longer kept
        self.listeners: list[Callable[[Event], None]] = []

    # ---- reads -------------------------------------------------------------------------------
    def get(self, resource: Resource, namespace: str, name: str) -> Body:
        with self.lock:
            found = self.objects.get((resource, namespace, name))
            if found is None:
                raise not_found(resource, name)
            return copy.deepcopy(found)

    def find(self, resource: Resource, namespace: str, name: str) -> Body | None:
        with self.lock:
            found = self.objects.get((resource, namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def list(
        self, resource: Resource, namespace: str | None, selector: Callable[[Body], bool]
    ) -> tuple[list[Body], int]:
        """Matching objects (every namespace when `namespace` is None) and the version read."""
        with self.lock:
            items = [
                copy.deepcopy(body)
                for (kind, space, _), body in sorted(
                    self.objects.items(), key=lambda item: item[0][1:]
                )
                if kind == resource and namespace in (None, space) and selector(body)
            ]
            return items, self.version

    def events_since(self, version: int) -> Iterator[Event]:
        """The events after `version`; 410 Gone when they are no longer all kept."""
        with self.lock:
            if version < self.floor:
                raise ApiError(
                    410, "Expired", f"too old resource version: {version} ({self.floor})"
                )
            return iter([event for event in self.events if event.version > version])

    def compact(self) -> None:
        """Forget every event so far, as etcd's compaction does."""
        with self.lock:
            self.floor = self.version
            self.events.clear()

    # ---- writes ------------------------------------------------------------------------------
    def _record(self, type_: str, resource: Resource, body: Body) -> None:
        event = Event(type_, resource, copy.deepcopy(body), self.version)
        if len(self.events) == self.events.maxlen:
            self.floor = self.events[0].version
        self.events.append(event)
        for listener in list(self.listeners):
            listener(event)
        self.changed.notify_all()

    def _stamp(self, body: Body) -> None:
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)

    def create(self, resource: Resource, namespace: str, body: Body) -> Body:
        with self.lock:
            meta = body.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            name = meta.get("name")
            if not name:
                raise ApiError(
                    422, "Invalid", f"{resource.kind} is invalid: metadata.name: Required value"
                )
            key = (resource, namespace, name)
            if key in self.objects:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{resource.qualified} "{name}" already exists',
                    {"name": name, "group": resource.group, "kind": resource.plural},
                )
            body["apiVersion"], body["kind"] = resource.api_version, resource.kind
            if resource.namespaced:
                meta["namespace"] = namespace
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
            meta.pop("deletionTimestamp", None)
            self._stamp(body)
            self.objects[key] = body
            self._record("ADDED", resource, body)
            return copy.deepcopy(body)

    def replace(self, resource: Resource, namespace: str, body: Body, *, status: bool) -> Body:
        """PUT: the caller's resourceVersion must be the current one (409 Conflict otherwise).
        A write to the main resource keeps the status; one to /status keeps the rest."""
        with self.lock:
            name = body.get("metadata", {}).get("name", "")
            current = self.objects.get((resource, namespace, name))
            if current is None:
                raise not_found(resource, name)
            given = body["metadata"].get("resourceVersion")
            if given and given != current["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource.qualified} "{name}": the '
                    "object has been modified; please apply your changes to the latest version "
                    "and try again",
                    {"name": name, "group": resource.group, "kind": resource.plural},
                )
            updated = copy.deepcopy(current)
            if status:
                updated["status"] = copy.deepcopy(body.get("status", {}))
            else:
                for field, value in body.items():
                    if field not in ("status", "metadata", "apiVersion", "kind"):
                        updated[field] = copy.deepcopy(value)
                for field in ("labels", "annotations", "finalizers", "ownerReferences"):
                    if field in body["metadata"]:
                        updated["metadata"][field] = copy.deepcopy(body["metadata"][field])
                if updated.get("spec") != current.get("spec"):
                    updated["metadata"]["generation"] = current["metadata"]["generation"] + 1
            if updated == current:
                return copy.deepcopy(current)  # a no-op write keeps its version
            self._stamp(updated)
            self.objects[(resource, namespace, name)] = updated
            self._record("MODIFIED", resource, updated)
            return copy.deepcopy(updated)

    def delete(self, resource: Resource, namespace: str, name: str) -> Body:
        """Removes the object and, as the garbage collector does, everything it owns."""
        with self.lock:
            body = self.objects.pop((resource, namespace, name), None)
            if body is None:
                raise not_found(resource, name)
            self._stamp(body)
            self._record("DELETED", resource, body)
            uid = body["metadata"]["uid"]
            for key, other in list(self.objects.items()):
                owners = other["metadata"].get("ownerReferences", [])
                if key in self.objects and any(owner.get("uid") == uid for owner in owners):
                    self.delete(*key)
            return copy.deepcopy(body)
