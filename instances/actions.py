"""One rule per instance action: it hides or disables the buttons and guards the services."""

from dataclasses import dataclass

from instances.backends import backend_available, backend_named, is_local_backend
from instances.choices import POWER_TRANSITIONAL, PowerState, Role, RunStrategy
from instances.errors import ActionRefused
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


def _power_check(instance: Instance, role: Role | None) -> Allowed:
    """Any backend the console has (qemu, and aws once provisioning registered it) powers its
    machines on and off."""
    if not (allowed := _role_check(role, Role.OPERATOR)):
        return allowed
    if not backend_available(instance.backend):
        return Allowed(
            False, f"Power operations on {instance.backend} instances are not available yet."
        )
    return YES


def _local_check(instance: Instance) -> Allowed:
    """Disks, interfaces and run strategies are the console's only for machines on its own
    hosts; a cloud VM (backend aws) belongs to the provisioning job that made it."""
    if is_local_backend(instance.backend):
        return YES
    return Allowed(
        False,
        f"The disks, network interfaces and run strategy of {instance.backend} instances are "
        "set by their provisioning job, not here.",
    )


def start(instance: Instance, role: Role | None) -> Allowed:
    if not (allowed := _power_check(instance, role)):
        return allowed
    if instance.start_refusal:
        return Allowed(False, instance.start_refusal)
    if instance.run_strategy == RunStrategy.HALTED:
        return Allowed(False, "The run strategy is Halted: change it before starting.")
    if instance.power_state not in STOPPED_STATES:
        return Allowed(False, f"The instance is {_state_label(instance)}.")
    return YES


def _running_only(instance: Instance, role: Role | None) -> Allowed:
    if not (allowed := _power_check(instance, role)):
        return allowed
    if instance.power_state != PowerState.RUNNING:
        return Allowed(False, f"The instance is {_state_label(instance)}.")
    return YES


def shutdown(instance: Instance, role: Role | None) -> Allowed:
    if not (allowed := _running_only(instance, role)):
        return allowed
    if instance.stop_refusal:
        return Allowed(False, instance.stop_refusal)
    return YES


def force_stop(instance: Instance, role: Role | None) -> Allowed:
    if not (allowed := _power_check(instance, role)):
        return allowed
    if instance.power_state in STOPPED_STATES:
        return Allowed(False, f"The instance is {_state_label(instance)}.")
    if instance.stop_refusal:
        return Allowed(False, instance.stop_refusal)
    return YES


def delete(instance: Instance, role: Role | None) -> Allowed:
    if not (allowed := _role_check(role, Role.ADMIN)):
        return allowed
    if not is_local_backend(instance.backend):
        return Allowed(
            False,
            f"{instance.backend} instances go when their provisioning job is deleted: its "
            "teardown terminates the VMs.",
        )
    if instance.power_state not in STOPPED_STATES:
        return Allowed(False, "Stop the instance before deleting it.")
    return YES


def configure(instance: Instance, role: Role | None) -> Allowed:
    """Change the run strategy, add disks and NICs, set links."""
    if not (allowed := _role_check(role, Role.OPERATOR)):
        return allowed
    if not (allowed := _local_check(instance)):
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


def revert_disk(instance: Instance, role: Role | None) -> Allowed:
    if not (allowed := configure(instance, role)):
        return allowed
    if instance.power_state not in STOPPED_STATES:
        return Allowed(False, "Stop the instance before reverting a disk to a snapshot.")
    return YES


def manage(role: Role | None) -> Allowed:
    """Create and remove project resources: subnets, SSH keys, disks, Elastic IPs."""
    return _role_check(role, Role.OPERATOR)


def require(allowed: Allowed) -> None:
    """Services call this: a refused action raises with the reason the button shows."""
    if not allowed:
        raise ActionRefused(allowed.reason)


def view_password(instance: Instance, role: Role | None) -> Allowed:
    return _role_check(role, Role.ADMIN)


RULES = {
    "start": start,
    "shutdown": shutdown,
    "force_stop": force_stop,
    "restart": _running_only,
    "delete": delete,
    "configure": configure,
    "detach_disk": detach_disk,
    "revert_disk": revert_disk,
    "view_password": view_password,
}


def instance_allowed_actions(instance: Instance, role: Role | None) -> dict[str, Allowed]:
    return {name: rule(instance, role) for name, rule in RULES.items()}


# ---- consoles --------------------------------------------------------------------------------
# Kept apart from RULES (the power and configuration actions the API lists): the console pages,
# the ticket view and the console proxy all decide through these.
CONSOLE_STATES = (PowerState.RUNNING, PowerState.RESTARTING)


def _console_backend_check(instance: Instance) -> Allowed:
    if is_local_backend(instance.backend):
        return YES
    if not backend_available(instance.backend):
        return Allowed(False, f"Consoles of {instance.backend} instances are not available yet.")
    channel = backend_named(instance.backend).exec_channel
    return Allowed(
        False,
        f"{instance.backend} instances have no serial, VNC or exec console here: interactive "
        f"access goes only through the cloud's IAM-gated exec channel ({channel}), as your own "
        "cloud identity: the command is on the instance's page.",
    )


def console(instance: Instance, role: Role | None) -> Allowed:
    """Open a console of a running instance; viewers watch it read-only."""
    if not (allowed := _role_check(role, Role.VIEWER)):
        return allowed
    if not (allowed := _console_backend_check(instance)):
        return allowed
    if instance.power_state not in CONSOLE_STATES:
        return Allowed(False, f"The instance is {_state_label(instance)}: start it first.")
    return YES


def console_interactive(instance: Instance, role: Role | None) -> Allowed:
    """Type into a console, and take the keyboard over from another operator."""
    if not (allowed := _role_check(role, Role.OPERATOR)):
        return allowed
    return console(instance, role)


def serial_log(instance: Instance, role: Role | None) -> Allowed:
    """Download everything the guest printed on its serial port (kept across power-offs)."""
    if not (allowed := _role_check(role, Role.VIEWER)):
        return allowed
    return _console_backend_check(instance)


def console_recordings(instance: Instance, role: Role | None) -> Allowed:
    """Replay or download the asciicast recordings of console sessions."""
    return _role_check(role, Role.ADMIN)


CONSOLE_RULES = {
    "console": console,
    "console_interactive": console_interactive,
    "serial_log": serial_log,
    "console_recordings": console_recordings,
}


def instance_console_actions(instance: Instance, role: Role | None) -> dict[str, Allowed]:
    return {name: rule(instance, role) for name, rule in CONSOLE_RULES.items()}
