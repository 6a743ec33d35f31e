"""The answer every rule gives (allowed, or why not) and the checks the rules share."""

from dataclasses import dataclass

from django.core.exceptions import ValidationError

from instances.backends import backend_available, is_managed_backend
from instances.choices import PowerState, Role
from instances.errors import ActionRefused
from instances.models import Instance


@dataclass(frozen=True)
class Allowed:
    """A rule's answer. A `hidden` refusal hides a row's button instead of disabling it (the
    action makes no sense for that row, as detaching a root disk); one with a `field` is a
    mistake in the request at that field, not a refusal of the moment."""

    ok: bool
    reason: str = ""
    hidden: bool = False
    field: str = ""

    def __bool__(self) -> bool:
        return self.ok


YES = Allowed(True)
STOPPED_STATES = (PowerState.STOPPED, PowerState.FAILED)


def role_check(role: Role | None, needed: Role) -> Allowed:
    if role is None or not role.allows(needed):
        return Allowed(False, f"Needs the {needed.label.lower()} role.")
    return YES


def state_label(instance: Instance) -> str:
    return instance.get_power_state_display().lower()


def power_check(instance: Instance, role: Role | None) -> Allowed:
    """Any backend the console has (qemu, and aws once provisioning registered it) powers its
    machines on and off."""
    if not (allowed := role_check(role, Role.OPERATOR)):
        return allowed
    if not backend_available(instance.backend):
        return Allowed(
            False, f"Power operations on {instance.backend} instances are not available yet."
        )
    return YES


def managed_check(instance: Instance) -> Allowed:
    """Disks, interfaces and run strategies are the console's for machines on its own hosts
    and its clusters; a cloud VM (backend aws) belongs to the provisioning job that made it."""
    if is_managed_backend(instance.backend):
        return YES
    return Allowed(
        False,
        f"The disks, network interfaces and run strategy of {instance.backend} instances are "
        "set by their provisioning job, not here.",
    )


def require(allowed: Allowed) -> None:
    """Services call this: a refused action raises with the reason the button shows."""
    if allowed.field:
        raise ValidationError({allowed.field: allowed.reason})
    if not allowed:
        raise ActionRefused(allowed.reason)
