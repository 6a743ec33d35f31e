"""KubeVirt's live migration, as far as the console depends on it: a VirtualMachineInstanceMigration
(VMIM) is admitted only for a running VMI with no migration in flight; the migration controller
takes it through Pending, Scheduling, Scheduled, PreparingTarget, TargetReady and Running to
Succeeded or Failed, keeping the VMI's status.migrationState as virt-handler does; the guest
moves as QEMU's own live migration between the two nodes' QEMU processes (they share one disk
folder, as RWX storage). Deleting a VMIM before it ends aborts it.

Where it stops: no migration policies, bandwidth limits or post-copy; one migration per VMI."""

import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from instances.backends.base import BackendError
from tests.fakes.kubevirt.store import BY_KIND, ApiError, Body, _now

if TYPE_CHECKING:
    from tests.fakes.kubevirt.controller import Controller

MIGRATION, VMI = BY_KIND["VirtualMachineInstanceMigration"], BY_KIND["VirtualMachineInstance"]
NODE = BY_KIND["Node"]
WEBHOOK = "migration-create-validator.kubevirt.io"
ENDED = ("Succeeded", "Failed")
# KubeVirt's default: a target pod unschedulable this long fails its migration
UNSCHEDULABLE_TIMEOUT = 300.0
MIGRATION_TIMEOUT = 300.0  # KubeVirt's progressTimeout and completion timeout, together


@dataclass
class Moving:
    """What the two virt-handlers know of one migration under way."""

    namespace: str
    vmi: str
    source: str = ""
    target: str = ""
    address: str = ""
    since: float = field(default_factory=time.monotonic)


class Migrations:
    """The migration controller and both nodes' parts; the Controller calls `reconcile` in
    each of its passes, under its lock."""

    def __init__(self, controller: "Controller") -> None:
        self.controller, self.store = controller, controller.store
        self.moving: dict[str, Moving] = {}  # by the VMIM's uid
        self.unschedulable_timeout = UNSCHEDULABLE_TIMEOUT
        self.held = False  # tests: Running migrations wait, as ones still converging do
        controller.api.admissions[MIGRATION.kind] = self.admit

    def admit(self, namespace: str, body: Body) -> None:
        """The create webhook: the VMI must exist, run, and have no migration in flight."""
        name = body.get("spec", {}).get("vmiName", "")
        if not name:
            raise ApiError(
                422, "Invalid",
                f'admission webhook "{WEBHOOK}" denied the request: spec.vmiName is required',
                {"causes": [{"reason": "FieldValueRequired", "message": "vmiName is required",
                             "field": "spec.vmiName"}]},
            )  # fmt: skip
        vmi = self.store.find(VMI, namespace, name)
        if vmi is None:
            self._deny(f'the VMI "{namespace}/{name}" does not exist')
            return
        status = vmi.get("status", {})
        if status.get("phase") != "Running":
            self._deny("Cannot migrate VMI that's not running.")
        state = status.get("migrationState")
        if state and not state.get("completed") and not state.get("failed"):
            self._deny(
                f"in-flight migration detected. Active migration job ({state.get('migrationUid')}) "
                f"is currently already in progress for VMI {name}."
            )

    @staticmethod
    def _deny(message: str) -> None:
        raise ApiError(
            400, "BadRequest", f'admission webhook "{WEBHOOK}" denied the request: {message}'
        )

    # ---- the controller's pass ---------------------------------------------------------------
    def reconcile(self) -> None:
        migrations, _ = self.store.list(MIGRATION, None, lambda body: True)
        present = set()
        for migration in migrations:
            uid = migration["metadata"]["uid"]
            present.add(uid)
            if migration.get("status", {}).get("phase") not in ENDED:
                self._step(migration)
        for uid in set(self.moving) - present:  # deleted before it ended: abort it
            self._abort(uid, self.moving.pop(uid))

    def _step(self, migration: Body) -> None:
        """Move one migration on by one phase (a wait keeps it where it is)."""
        namespace, uid = migration["metadata"]["namespace"], migration["metadata"]["uid"]
        phase = migration.get("status", {}).get("phase", "")
        moving = self.moving.setdefault(uid, Moving(namespace, migration["spec"]["vmiName"]))
        vmi = self.store.find(VMI, namespace, moving.vmi)
        if vmi is None or vmi.get("status", {}).get("phase") != "Running":
            self._fail(migration, moving, "the VMI stopped running")
            return
        if not phase:
            self._phase(migration, "Pending")
        elif phase == "Pending":
            moving.source = vmi["status"]["nodeName"]
            self._phase(migration, "Scheduling")
        elif phase == "Scheduling":
            target = self._target(vmi, migration)
            if target is None:
                if time.monotonic() - moving.since > self.unschedulable_timeout:
                    self._fail(migration, moving, "the target pod could not be scheduled: no "
                               "other node of the VMI's zone has room for it")  # fmt: skip
                return
            moving.target = target
            state = {"sourceNode": moving.source, "targetNode": target, "migrationUid": uid}
            self._vmi_state(vmi, {**state, "completed": False, "failed": False})
            self._phase(migration, "Scheduled", state)
        elif phase == "Scheduled":
            self._phase(migration, "PreparingTarget")
            try:
                spec = self.controller.machine_for(vmi)
                moving.address = self._backend(moving.target).migration_receive(spec)
            except (BackendError, ApiError) as error:
                self._fail(migration, moving, f"the target could not be prepared: {error}")
                return
            self._phase(migration, "TargetReady")
        elif phase == "TargetReady":
            try:
                self._backend(moving.source).migration_send(self._machine(vmi), moving.address)
            except BackendError as error:
                self._fail(migration, moving, f"the source could not send: {error}")
                return
            self._vmi_state(vmi, {"startTimestamp": _now()})
            self._phase(migration, "Running")
        elif phase == "Running" and not self.held:
            self._follow(migration, moving, vmi)

    def _follow(self, migration: Body, moving: Moving, vmi: Body) -> None:
        machine = self._machine(vmi)
        source = self._backend(moving.source)
        try:
            progress = source.migration_progress(machine)
        except BackendError as error:
            self._fail(migration, moving, f"the source stopped answering: {error}")
            return
        if not progress.finished:
            if time.monotonic() - moving.since > MIGRATION_TIMEOUT:
                with contextlib.suppress(BackendError):
                    source.migration_cancel(machine)
                self._fail(migration, moving, "it did not complete in time")
            return
        if progress.status != "completed":
            self._fail(migration, moving, progress.error or f"QEMU reports {progress.status}")
            return
        current = self.store.get(VMI, moving.namespace, moving.vmi)
        current["status"]["nodeName"] = moving.target
        current["status"]["migrationState"].update(completed=True, endTimestamp=_now())
        current["status"]["migrationState"]["targetNodeDomainDetected"] = True
        self.store.replace(VMI, moving.namespace, current, status=True)
        source.migration_hand_over(machine)
        source.undefine(machine)
        self._phase(migration, "Succeeded", current["status"]["migrationState"])
        self.moving.pop(migration["metadata"]["uid"], None)

    def _fail(self, migration: Body, moving: Moving, reason: str) -> None:
        """The guest runs on at its source: the target's QEMU goes, the VMI says why."""
        self._abandon(moving)
        ended = {"completed": True, "failed": True, "endTimestamp": _now(),
                 "failureReason": reason}  # fmt: skip
        vmi = self.store.find(VMI, moving.namespace, moving.vmi)
        if vmi is not None and vmi.get("status", {}).get("migrationState"):  # once Scheduled
            self._vmi_state(vmi, ended)
        current = self.store.find(MIGRATION, moving.namespace, migration["metadata"]["name"])
        state = (current or {}).get("status", {}).get("migrationState", {})
        self._phase(migration, "Failed", {**state, **ended})
        self.moving.pop(migration["metadata"]["uid"], None)

    def _abort(self, uid: str, moving: Moving) -> None:
        if moving.source and moving.address:
            with contextlib.suppress(BackendError):
                self._backend(moving.source).migration_cancel(self._machine_named(moving))
        self._abandon(moving)
        vmi = self.store.find(VMI, moving.namespace, moving.vmi)
        if vmi is not None and vmi.get("status", {}).get("migrationState"):
            self._vmi_state(vmi, {"abortRequested": True, "abortStatus": "Succeeded",
                                  "completed": True, "failed": True, "endTimestamp": _now()})  # fmt: skip

    def _abandon(self, moving: Moving) -> None:
        if moving.target and moving.address:
            with contextlib.suppress(BackendError):
                target = self._backend(moving.target)
                target.migration_abandon(self._machine_named(moving))
                target.undefine(self._machine_named(moving))

    # ---- helpers -----------------------------------------------------------------------------
    def _target(self, vmi: Body, migration: Body) -> str | None:
        """A node other than the VMI's, matching its nodeSelector and the migration's
        addedNodeSelector (which only narrows it), with memory for it."""
        selector = {**migration["spec"].get("addedNodeSelector", {}),
                    **vmi["spec"].get("nodeSelector", {})}  # fmt: skip
        return self.controller.node_for(vmi, selector, exclude=vmi["status"]["nodeName"])

    def _phase(self, migration: Body, phase: str, state: Body | None = None) -> None:
        """Record the VMIM's new phase (and its migrationState, if given) as stored now."""
        current = self.store.find(MIGRATION, migration["metadata"]["namespace"],
                                  migration["metadata"]["name"])  # fmt: skip
        if current is None:
            return
        status = current.setdefault("status", {})
        status["phase"] = phase
        status["phaseTransitionTimestamps"] = [
            *status.get("phaseTransitionTimestamps", []),
            {"phase": phase, "phaseTransitionTimestamp": _now()},
        ]
        if state is not None:
            status["migrationState"] = state
        self.store.replace(MIGRATION, current["metadata"]["namespace"], current, status=True)
        moving = self.moving.get(current["metadata"]["uid"])
        if moving is not None:
            moving.since = time.monotonic()  # the phase's own timeouts count from here

    def _vmi_state(self, vmi: Body, changes: Body) -> None:
        current = self.store.get(VMI, vmi["metadata"]["namespace"], vmi["metadata"]["name"])
        state = current["status"].get("migrationState", {})
        if "migrationUid" in changes:  # a new migration: the last one's state goes
            state = {}
        current["status"]["migrationState"] = {**state, **changes}
        self.store.replace(VMI, vmi["metadata"]["namespace"], current, status=True)

    def _backend(self, node: str):
        return self.controller.node_backend(node)

    def _machine(self, vmi: Body) -> str:
        return self.controller._machine_id(vmi)

    def _machine_named(self, moving: Moving) -> str:
        return f"{moving.namespace}-{moving.vmi}"[:40]
