"""One rule per instance action: it hides or disables the buttons and guards the services.
Power operations declare theirs in power_operations, row actions in row_rules."""

from collections.abc import Callable

from instances.allowed import (
    STOPPED_STATES,
    YES,
    Allowed,
    managed_check,
    require,
    role_check,
    state_label,
)
from instances.backends import (
    backend_available,
    backend_named,
    is_managed_backend,
)
from instances.backends.base import ReadsSerialOutput
from instances.choices import POWER_TRANSITIONAL, PowerState, Role
from instances.models import Instance
from instances.power_operations import PAUSED_ADVICE, POWER_OPERATIONS

__all__ = ["STOPPED_STATES", "YES", "Allowed", "require"]


def delete(instance: Instance, role: Role | None, *, force: bool = False) -> Allowed:
    """`force` (apply --prune --force): a running instance too; its machine is ended."""
    if not (allowed := role_check(role, Role.ADMIN)):
        return allowed
    if not is_managed_backend(instance.backend):
        return Allowed(
            False,
            f"{instance.backend} instances go when their provisioning job is deleted: its "
            "teardown terminates the VMs.",
        )
    if instance.power_state not in STOPPED_STATES and not force:
        return Allowed(False, "Stop the instance before deleting it.")
    return YES


def configure(instance: Instance, role: Role | None) -> Allowed:
    """Change the run strategy, add disks and NICs, set links."""
    if not (allowed := role_check(role, Role.OPERATOR)):
        return allowed
    if not (allowed := managed_check(instance)):
        return allowed
    if instance.power_state in POWER_TRANSITIONAL:
        return Allowed(False, f"Wait until the instance is no longer {state_label(instance)}.")
    if instance.power_state == PowerState.PAUSED:
        return Allowed(False, PAUSED_ADVICE)
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
    return role_check(role, Role.OPERATOR)


def view_password(instance: Instance, role: Role | None) -> Allowed:
    return role_check(role, Role.ADMIN)


RULES: dict[str, Callable[[Instance, Role | None], Allowed]] = {
    **{operation.name: operation.rule for operation in POWER_OPERATIONS},
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
CONSOLE_STATES = (PowerState.RUNNING, PowerState.RESTARTING, PowerState.MIGRATING)


def _console_backend_check(instance: Instance, kind: str = "serial") -> Allowed:
    """Whether the instance's backend serves this console kind."""
    if not backend_available(instance.backend):
        return Allowed(False, f"Consoles of {instance.backend} instances are not available yet.")
    backend = backend_named(instance.backend)
    if kind in backend.console_kinds:
        return YES
    if backend.console_kinds:
        return Allowed(
            False,
            f"{instance.backend} gives its machines no {kind} console: use "
            f"{' or '.join(sorted(backend.console_kinds))}.",
        )
    channel = backend.exec_channel
    return Allowed(
        False,
        f"{instance.backend} instances have no serial, VNC or exec console here: interactive "
        f"access goes only through the cloud's IAM-gated exec channel ({channel}), as your own "
        "cloud identity: the command is on the instance's page.",
    )


def _console_of(kind: str) -> Callable[[Instance, Role | None], Allowed]:
    def console(instance: Instance, role: Role | None) -> Allowed:
        """Open a console of a running instance; viewers watch it read-only. A cloud's exec
        channel starts a session as the job's account: operators only."""
        if not (allowed := role_check(role, Role.VIEWER)):
            return allowed
        if not (allowed := _console_backend_check(instance, kind)):
            return allowed
        if backend_named(instance.backend).exec_channel and not (
            allowed := role_check(role, Role.OPERATOR)
        ):
            return allowed
        if instance.power_state not in CONSOLE_STATES:
            return Allowed(False, f"The instance is {state_label(instance)}: start it first.")
        return YES

    return console


def _interactive(opens: Callable[[Instance, Role | None], Allowed]):
    def console_interactive(instance: Instance, role: Role | None) -> Allowed:
        """Type into a console, and take the keyboard over from another operator."""
        if not (allowed := role_check(role, Role.OPERATOR)):
            return allowed
        return opens(instance, role)

    return console_interactive


console = _console_of("serial")
console_interactive = _interactive(console)
vnc_console = _console_of("vnc")
exec_console = _console_of("exec")


def serial_log(instance: Instance, role: Role | None) -> Allowed:
    """Download everything the guest printed on its serial port (kept across power-offs)."""
    if not (allowed := role_check(role, Role.VIEWER)):
        return allowed
    if not (allowed := _console_backend_check(instance)):
        return allowed
    if not backend_named(instance.backend).keeps_serial_log:
        return Allowed(False, f"{instance.backend} keeps no serial log; open the serial console.")
    return YES


def serial_output(instance: Instance, role: Role | None) -> Allowed:
    """Watch the guest's serial output as its cloud serves it (read-only, like a viewer)."""
    if not (allowed := role_check(role, Role.VIEWER)):
        return allowed
    if not backend_available(instance.backend) or not isinstance(
        backend_named(instance.backend), ReadsSerialOutput
    ):
        return Allowed(False, f"{instance.backend} serves no serial output through its API.")
    return YES


def console_recordings(instance: Instance, role: Role | None) -> Allowed:
    """Replay or download the asciicast recordings of console sessions."""
    return role_check(role, Role.ADMIN)


CONSOLE_RULES = {
    "console": console,
    "console_interactive": console_interactive,
    "vnc_console": vnc_console,
    "vnc_console_interactive": _interactive(vnc_console),
    "exec_console": exec_console,
    "exec_console_interactive": _interactive(exec_console),
    "serial_log": serial_log,
    "serial_output": serial_output,
    "console_recordings": console_recordings,
}


def instance_console_actions(instance: Instance, role: Role | None) -> dict[str, Allowed]:
    return {name: rule(instance, role) for name, rule in CONSOLE_RULES.items()}
