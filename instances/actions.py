"""One rule per instance action: it hides or disables the buttons and guards the services."""

from dataclasses import dataclass

from instances.choices import POWER_TRANSITIONAL, PowerState, Role, RunStrategy
from instances.models import Instance


@dataclass(frozen=True)
class Allowed:
    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


YES = Allowed(True)
STOPPED_STATES = (PowerState.STOPPED, PowerState.FAILED)


def _role_check(role: Role | None, needed: Role) -> Allowed:
    if role is None or not role.allows(needed):
        return Allowed(False, f"Needs the {needed.label.lower()} role.")
    return YES


def _state_label(instance: Instance) -> str:
    return instance.get_power_state_display().lower()


def start(instance: Instance, role: Role | None) -> Allowed:
    if not (allowed := _role_check(role, Role.OPERATOR)):
        return allowed
    if instance.run_strategy == RunStrategy.HALTED:
        return Allowed(False, "The run strategy is Halted: change it before starting.")
    if instance.power_state not in STOPPED_STATES:
        return Allowed(False, f"The instance is {_state_label(instance)}.")
    return YES


def _running_only(instance: Instance, role: Role | None) -> Allowed:
    if not (allowed := _role_check(role, Role.OPERATOR)):
        return allowed
    if instance.power_state != PowerState.RUNNING:
        return Allowed(False, f"The instance is {_state_label(instance)}.")
    return YES


def force_stop(instance: Instance, role: Role | None) -> Allowed:
    if not (allowed := _role_check(role, Role.OPERATOR)):
        return allowed
    if instance.power_state in STOPPED_STATES:
        return Allowed(False, f"The instance is {_state_label(instance)}.")
    return YES


def delete(instance: Instance, role: Role | None) -> Allowed:
    if not (allowed := _role_check(role, Role.ADMIN)):
        return allowed
    if instance.power_state not in STOPPED_STATES:
        return Allowed(False, "Stop the instance before deleting it.")
    return YES


def configure(instance: Instance, role: Role | None) -> Allowed:
    """Change the run strategy, add disks and NICs, set links."""
    if not (allowed := _role_check(role, Role.OPERATOR)):
        return allowed
    if instance.power_state in POWER_TRANSITIONAL:
        return Allowed(False, f"Wait until the instance is no longer {_state_label(instance)}.")
    return YES


def detach_disk(instance: Instance, role: Role | None) -> Allowed:
    if not (allowed := configure(instance, role)):
        return allowed
    if instance.power_state not in STOPPED_STATES:
        return Allowed(
            False,
            "Stop the instance before detaching a persistent disk, so the guest flushes its "
            "writes and the filesystem stays consistent.",
        )
    return YES


def view_password(instance: Instance, role: Role | None) -> Allowed:
    return _role_check(role, Role.ADMIN)


RULES = {
    "start": start,
    "shutdown": _running_only,
    "force_stop": force_stop,
    "restart": _running_only,
    "delete": delete,
    "configure": configure,
    "detach_disk": detach_disk,
    "view_password": view_password,
}


def instance_allowed_actions(instance: Instance, role: Role | None) -> dict[str, Allowed]:
    return {name: rule(instance, role) for name, rule in RULES.items()}
