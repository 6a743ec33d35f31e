"""The power operations, one declaration each: the page's button and POST, the allowed-actions
rule, the claim (states it starts from, the transitional state), the host task and the API
route are all built from POWER_OPERATIONS.

A declaration named N needs `instances.services.machines.machine_N(instance_id, claimed_at)`
(which calls the backend) and nothing else: its task is `instances.machine_N`.
"""

from collections.abc import Callable
from dataclasses import dataclass

from instances.allowed import STOPPED_STATES, YES, Allowed, power_check, state_label
from instances.backends import CLUSTER_BACKENDS
from instances.choices import PowerState, Role, RunStrategy
from instances.models import Instance


def start(instance: Instance, role: Role | None) -> Allowed:
    if not (allowed := power_check(instance, role)):
        return allowed
    if instance.start_refusal:
        return Allowed(False, instance.start_refusal)
    if instance.run_strategy == RunStrategy.HALTED:
        return Allowed(False, "The run strategy is Halted: change it before starting.")
    if instance.power_state not in STOPPED_STATES:
        return Allowed(False, f"The instance is {state_label(instance)}.")
    return YES


PAUSED_ADVICE = "The guest is paused on a full disk: free space on the host, then Resume."


def restart(instance: Instance, role: Role | None) -> Allowed:
    if not (allowed := power_check(instance, role)):
        return allowed
    if instance.power_state == PowerState.PAUSED:
        return Allowed(False, PAUSED_ADVICE)
    if instance.power_state != PowerState.RUNNING:
        return Allowed(False, f"The instance is {state_label(instance)}.")
    return YES


def shutdown(instance: Instance, role: Role | None) -> Allowed:
    if not (allowed := restart(instance, role)):
        return allowed
    if instance.stop_refusal:
        return Allowed(False, instance.stop_refusal)
    return YES


def force_stop(instance: Instance, role: Role | None) -> Allowed:
    if not (allowed := power_check(instance, role)):
        return allowed
    if instance.power_state in STOPPED_STATES:
        return Allowed(False, f"The instance is {state_label(instance)}.")
    if instance.stop_refusal:
        return Allowed(False, instance.stop_refusal)
    return YES


def resume(instance: Instance, role: Role | None) -> Allowed:
    """Only a guest QEMU paused at a write to a full disk has anything to resume."""
    if not (allowed := power_check(instance, role)):
        return allowed
    if instance.power_state != PowerState.PAUSED:
        return Allowed(False, "Only a guest paused on a full disk resumes.", hidden=True)
    return YES


def migrate(instance: Instance, role: Role | None) -> Allowed:
    """Live migration is a cluster's: a machine on the console's own host has nowhere to go."""
    if not (allowed := power_check(instance, role)):
        return allowed
    if instance.backend not in CLUSTER_BACKENDS:
        return Allowed(
            False,
            "Live migration moves KubeVirt instances between a cluster's nodes; a "
            f"{instance.backend} instance has no other node to go to.",
            hidden=True,
        )
    if instance.power_state != PowerState.RUNNING:
        return Allowed(
            False, f"Only a running instance migrates; this one is {state_label(instance)}."
        )
    return YES


@dataclass(frozen=True)
class PowerOperation:
    """One power operation. `name` is its key in the allowed actions, the page's URL
    (power/<name>/), the audit event (instance.<name>) and the task (instances.machine_<name>);
    `path` its API route's last part."""

    name: str
    label: str
    rule: Callable[[Instance, Role | None], Allowed]
    sources: tuple[PowerState, ...]  # the states a request may claim it from
    transitional: PowerState
    path: str
    summary: str  # the API route's description
    style: str = ""  # the button's class
    question: str = ""  # what the button asks first (instances.confirm), if anything
    refused_while_reverting: bool = False  # a disk being reverted to a snapshot holds it off

    @property
    def task(self) -> str:
        return f"instances.machine_{self.name}"

    @property
    def audit_action(self) -> str:
        return f"instance.{self.name}"


POWER_OPERATIONS = (
    PowerOperation(
        "start", "Start", start, STOPPED_STATES, PowerState.STARTING,
        path="start", summary="Power on a stopped or failed instance.", style="primary",
        refused_while_reverting=True,
    ),
    PowerOperation(
        "shutdown", "Shutdown (ACPI)", shutdown, (PowerState.RUNNING,), PowerState.STOPPING,
        path="shutdown", summary="ACPI shutdown: the guest powers itself off cleanly.",
    ),
    PowerOperation(
        "force_stop", "Force Shutdown", force_stop,
        (PowerState.RUNNING, PowerState.STARTING, PowerState.STOPPING, PowerState.RESTARTING,
         PowerState.PAUSED),
        PowerState.STOPPING,
        path="force-stop", summary="Cut the power at once, for an unresponsive guest.",
        style="danger", question="force_stop",
    ),
    PowerOperation(
        "restart", "Restart", restart, (PowerState.RUNNING,), PowerState.RESTARTING,
        path="restart", summary="Reboot a running instance.",
    ),
    PowerOperation(
        "resume", "Resume", resume, (PowerState.PAUSED,), PowerState.STARTING,
        path="resume", summary="Let a guest paused on a full disk run on, once space is freed.",
        style="primary",
    ),
    PowerOperation(
        "migrate", "Migrate", migrate, (PowerState.RUNNING,), PowerState.MIGRATING,
        path="migrate",
        summary="Live-migrate a running KubeVirt instance to another node of its zone.",
    ),
)  # fmt: skip
POWER = {operation.name: operation for operation in POWER_OPERATIONS}
