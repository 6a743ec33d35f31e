"""The KubeVirt backend: a machine is a VirtualMachine in its project's namespace of a cluster,
powered through KubeVirt's subresources. KubeVirt enforces the run strategy; a power operation
asks for a change and waits, through a watch on the machine's instance (VMI), until the cluster
says it happened.

Backends know no models: `locate` (given by the services) says where a machine runs."""

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from instances.backends.base import (
    BackendError,
    DiskSpec,
    ExitKind,
    GuestFacts,
    MachineFact,
    MachineSpec,
    MachineStatus,
    MigrationReport,
    Power,
    RemoteConsole,
)
from instances.backends.kubevirt import devices, expansion, guest, imports, migrations
from instances.backends.kubevirt.connection import (
    TIMEOUT,
    ClusterAccess,
    api_client,
    console_endpoint,
    refusal,
    subresource,
)
from instances.backends.kubevirt.manifests import MACHINE_LABEL, Placement
from instances.backends.kubevirt.objects import KUBEVIRT, NamespaceObjects
from instances.backends.kubevirt.snapshots import VmSnapshots

Body = dict[str, Any]
START_TIMEOUT = 300.0  # scheduling, importing its disks, pulling the launcher
STOP_TIMEOUT = 60.0  # a forced stop: the pod's deletion
FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Location:
    """Where a machine runs: its cluster's name and access, and its placement there."""

    cluster: str
    access: ClusterAccess
    placement: Placement


class NotOnKubevirt(BackendError):
    def __init__(self, what: str) -> None:
        super().__init__(f"{what} on KubeVirt instances is not available yet.")


class KubevirtBackend:
    name = "kubevirt"
    pulls_container_disks = True  # a containerDisk volume: the cluster pulls it
    exec_channel = ""
    console_kinds = frozenset({"serial", "vnc"})  # KubeVirt has no exec channel into a guest
    keeps_serial_log = False
    stop_cuts_power = True  # KubeVirt's stop ends the run: the grace period, then the power cut
    title = "KubeVirt"
    changes_media_live = False

    def __init__(
        self,
        locate: Callable[[str], Location | None],
        clusters: Callable[[], Sequence[ClusterAccess]],
        ca_folder: Path,
        image_url: Callable[[DiskSpec], str] = lambda disk: "",
    ) -> None:
        self.locate, self.clusters, self.ca_folder = locate, clusters, ca_folder
        self.image_url = image_url
        self._clients: dict[ClusterAccess, client.ApiClient] = {}

    # ---- where ---------------------------------------------------------------------------
    def _client(self, access: ClusterAccess) -> client.ApiClient:
        api = self._clients.get(access)
        if api is None:
            api = self._clients[access] = api_client(access, self.ca_folder)
        return api

    def _at(self, machine_id: str) -> tuple[NamespaceObjects, Location]:
        where = self.locate(machine_id)
        if where is None:
            raise BackendError(f"{machine_id} runs on no cluster the console knows.")
        return NamespaceObjects(self._client(where.access), where.placement.namespace), where

    def _act(self, objects: NamespaceObjects, machine_id: str, action: str, body: Body) -> bool:
        """PUT the VM's subresource; False when the cluster answers 409 (already so)."""
        try:
            subresource(objects.api, objects.namespace, "virtualmachines", machine_id, action, body)
        except client.ApiException as error:
            if error.status == 409:
                return False
            raise refusal(error, objects.api.configuration.host) from None
        except Exception as error:
            raise refusal(error, objects.api.configuration.host) from None
        return True

    def _watch(self, objects: NamespaceObjects, machine_id: str, timeout: float) -> Iterator[Body]:
        """The machine's VMI as it is now, then at each change, until `timeout` passes; an
        event of type DELETED comes as {"deleted": True}."""
        stream = watch.Watch().stream(
            objects.custom.list_namespaced_custom_object, *KUBEVIRT, objects.namespace,
            "virtualmachineinstances", field_selector=f"metadata.name={machine_id}",
            timeout_seconds=max(1, math.ceil(timeout)),
        )  # fmt: skip
        try:
            for event in stream:
                if event["type"] == "DELETED":
                    yield {"deleted": True}
                elif event["type"] in ("ADDED", "MODIFIED"):
                    yield event["object"]
        except client.ApiException as error:
            raise refusal(error, objects.api.configuration.host) from None

    # ---- power ---------------------------------------------------------------------------
    def define(self, spec: MachineSpec) -> None:
        """Writes the VM; one not running yet is written Halted, so writing never starts it."""
        objects, where = self._at(spec.id)
        vm = objects.virtual_machine(spec.id)
        strategy = vm["spec"].get("runStrategy", "Halted") if vm else "Halted"
        placement = replace(where.placement, run_strategy=strategy)
        objects.define(spec, placement, self.image_url)

    def start(self, spec: MachineSpec) -> bool:
        objects, where = self._at(spec.id)
        vmi = objects.virtual_machine_instance(spec.id)
        if vmi is not None and vmi.get("status", {}).get("phase") == "Running":
            return False
        ended = vmi["metadata"]["uid"] if vmi else ""  # a run that finished: not this one
        objects.define(spec, where.placement, self.image_url)
        imports.forget_stale(spec, objects)  # import again, from the links just written
        if where.placement.run_strategy == "Once":  # virt-api refuses to start Once, but
            if ended:  # its controller runs a new VMI once the finished one is gone
                objects.delete_instance(spec.id)
        elif where.placement.run_strategy != "Always":  # Always runs it once written so
            self._act(objects, spec.id, "start", {})
        deadline = time.monotonic() + START_TIMEOUT
        if problem := imports.await_imports(objects, spec, deadline):
            halted = replace(where.placement, run_strategy="Halted")  # no start left pending
            objects.define(spec, halted, self.image_url)
            raise BackendError(problem)
        while time.monotonic() < deadline:
            for vmi in self._watch(objects, spec.id, deadline - time.monotonic()):
                if "deleted" in vmi or vmi["metadata"]["uid"] == ended:
                    continue
                if vmi.get("status", {}).get("phase") == "Running":
                    return True
                if problem := _start_problem(vmi):
                    self._act(objects, spec.id, "stop", {"gracePeriod": 0})  # nothing left pending
                    raise BackendError(problem)
        self._act(objects, spec.id, "stop", {"gracePeriod": 0})
        raise BackendError(f"The cluster did not run {spec.name} within {START_TIMEOUT:.0f} s.")

    def shutdown(self, machine_id: str, grace: float | None = None) -> None:
        """KubeVirt's stop: the guest gets ACPI, and `grace` seconds (else the VMI's own grace
        period) to power off before KubeVirt cuts the power."""
        objects, _ = self._at(machine_id)
        body = {} if grace is None else {"gracePeriod": max(1, math.ceil(grace))}
        self._act(objects, machine_id, "stop", body)

    def wait_powered_off(self, machine_id: str, timeout: float) -> bool:
        objects, _ = self._at(machine_id)
        deadline = time.monotonic() + timeout
        if self._off(objects.virtual_machine_instance(machine_id)):
            return True
        while (left := deadline - time.monotonic()) > 0:
            for vmi in self._watch(objects, machine_id, left):
                if self._off(vmi):
                    return True
                if time.monotonic() >= deadline:
                    return False
        return False

    @staticmethod
    def _off(vmi: Body | None) -> bool:
        return vmi is None or "deleted" in vmi or vmi.get("status", {}).get("phase") in FINISHED

    def withdraw_stop(self, machine_id: str) -> None:
        """A stop on KubeVirt ends with the grace period, power cut: there is none to withdraw."""

    def force_stop(self, machine_id: str) -> None:
        objects, _ = self._at(machine_id)
        self._act(objects, machine_id, "stop", {"gracePeriod": 0})
        if not self.wait_powered_off(machine_id, STOP_TIMEOUT):
            raise BackendError(
                f"The cluster did not stop {machine_id} within {STOP_TIMEOUT:.0f} s."
            )

    def restart(self, machine_id: str, request: str = "") -> None:
        """KubeVirt's restart: a new VMI, running."""
        objects, _ = self._at(machine_id)
        before = objects.virtual_machine_instance(machine_id)
        uid = before["metadata"]["uid"] if before else ""
        self._act(objects, machine_id, "restart", {})
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            for vmi in self._watch(objects, machine_id, deadline - time.monotonic()):
                if "deleted" in vmi or vmi["metadata"]["uid"] == uid:
                    continue
                if vmi.get("status", {}).get("phase") == "Running":
                    return
                if problem := _start_problem(vmi):
                    raise BackendError(problem)
        raise BackendError(
            f"The cluster did not run {machine_id} again within {START_TIMEOUT:.0f} s."
        )

    def status(self, machine_id: str) -> MachineStatus:
        objects, _ = self._at(machine_id)
        return machine_status(objects.virtual_machine_instance(machine_id))

    def machine_facts(self, machine_id: str) -> list[MachineFact]:
        where = self.locate(machine_id)
        if where is None:
            return []
        return [  # the node is the instance's, as the cluster's watch saw it: no call here
            MachineFact("Cluster", where.cluster),
            MachineFact("VirtualMachine", f"{where.placement.namespace}/{machine_id}"),
        ]

    def migrate(
        self, machine_id: str, on_progress: Callable[[MigrationReport], None]
    ) -> MigrationReport:
        """A live migration to another node, as KubeVirt picks it (migrations.py)."""
        objects, _ = self._at(machine_id)
        return migrations.migrate(objects, machine_id, on_progress)

    def undefine(self, machine_id: str) -> None:
        """Deletes the VirtualMachine; the cluster collects what it owns (its seed Secret and
        DataVolumes). A machine whose instance is gone is found by its label on each cluster."""
        if self.locate(machine_id) is not None:
            objects, _ = self._at(machine_id)
            objects.undefine(machine_id)
            return
        for access in self.clusters():
            api = self._client(access)
            custom = client.CustomObjectsApi(api)
            try:
                found = custom.list_cluster_custom_object(
                    *KUBEVIRT, "virtualmachines", label_selector=f"{MACHINE_LABEL}={machine_id}",
                    _request_timeout=TIMEOUT,
                )  # fmt: skip
            except Exception as error:
                raise refusal(error, access.api_url) from None
            assert isinstance(found, dict)
            for vm in found.get("items", []):
                NamespaceObjects(api, vm["metadata"]["namespace"]).undefine(machine_id)

    def delete_disk(self, disk_name: str) -> None:
        """A disk's DataVolume belongs to its VirtualMachine and goes with it."""

    def running_machines(self) -> list[str]:
        return []  # none on this console's hosts

    # ---- devices and the guest (devices.py, guest.py) -------------------------------------
    def set_link(self, machine_id: str, nic_name: str, up: bool) -> bool:
        objects, _ = self._at(machine_id)
        return devices.set_link(objects, machine_id, nic_name, up, self._watch)

    def attach_disk(self, spec: MachineSpec, disk: DiskSpec) -> None:
        objects, _ = self._at(spec.id)
        act = partial(self._act, objects, spec.id)
        devices.attach_disk(objects, spec.id, disk, act, self._watch)

    def detach_disk(self, machine_id: str, disk_name: str) -> None:
        objects, _ = self._at(machine_id)
        act = partial(self._act, objects, machine_id)
        devices.detach_disk(objects, machine_id, disk_name, act, self._watch)

    def guest_facts(self, machine_id: str) -> GuestFacts:
        objects, _ = self._at(machine_id)
        return guest.guest_facts(objects, machine_id)

    def resize_disk(self, spec: MachineSpec, disk: DiskSpec) -> None:
        """Grow the disk's volume (expansion.py); a running guest sees it grow."""
        expansion.resize_disk(self._at(spec.id)[0], spec.id, disk)

    # ---- what comes next -------------------------------------------------------------------

    def snapshot_disks(
        self, machine_id: str, disks: Sequence[DiskSpec], snapshot_name: str
    ) -> bool:
        """One VirtualMachineSnapshot for the disks; consistent when KubeVirt's guest agent
        froze the filesystems for it (see kubevirt/snapshots.py for the mapping)."""
        return VmSnapshots(self._at(machine_id)[0], machine_id).take(disks, snapshot_name)

    def delete_snapshot(self, machine_id: str, disk_name: str, snapshot_name: str) -> None:
        VmSnapshots(self._at(machine_id)[0], machine_id).delete(disk_name, snapshot_name)

    def revert_snapshot(self, machine_id: str, disk_name: str, snapshot_name: str) -> int:
        """A VirtualMachineRestore of the stopped VM from the disk's snapshot."""
        return VmSnapshots(self._at(machine_id)[0], machine_id).revert(disk_name, snapshot_name)

    def change_cdrom(self, machine_id: str, disk_name: str, iso: Path | None) -> None:
        raise NotOnKubevirt("Changing a CD-ROM's media")

    def guest_exec(self, machine_id: str, argv: list[str], timeout: float = 10) -> tuple[int, str]:
        raise NotOnKubevirt("Running a command in the guest")

    def serial_log(self, machine_id: str) -> None:
        """KubeVirt keeps no serial log the console can read: the serial console's viewers get
        what the proxy saw since it opened it."""
        return None

    def console_socket(self, machine_id: str, kind: str) -> RemoteConsole:
        """The VMI's `console` (serial) or `vnc` subresource websocket."""
        subresource = {"serial": "console", "vnc": "vnc"}.get(kind)
        if subresource is None:
            raise BackendError(f"KubeVirt serves no {kind} console; use serial or VNC.")
        _, where = self._at(machine_id)
        return console_endpoint(
            where.access, self.ca_folder, where.placement.namespace, machine_id, subresource
        )


def machine_status(vmi: Body | None) -> MachineStatus:
    """A VMI as the console's machine status: running while its phase is Running; after, how it
    ended (a guest's own power-off Succeeds it, a crash Fails it)."""
    if vmi is None:
        return MachineStatus(Power.STOPPED)
    phase = vmi.get("status", {}).get("phase")
    if phase == "Running":
        return MachineStatus(Power.RUNNING)
    exit_kind = {"Succeeded": ExitKind.GUEST_POWEROFF, "Failed": ExitKind.CRASHED}.get(
        phase or "", ExitKind.NONE
    )
    return MachineStatus(Power.STOPPED, exit=exit_kind)


def _start_problem(vmi: Body) -> str:
    """Why a VMI will not run, in the cluster's words; "" while it may still."""
    status = vmi.get("status", {})
    if "deleted" in vmi:
        return ""
    if status.get("phase") == "Failed":
        return f"The cluster failed to run it: {status.get('reason') or 'see its events'}."
    for condition in status.get("conditions", []):
        if condition.get("reason") == "Unschedulable":
            return f"The cluster cannot place it: {condition.get('message', '')}"
    return ""
