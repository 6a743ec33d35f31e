"""Power operations as users ask for them: check, claim the transition, queue the work.

Each request moves the instance into the operation's transitional state with a conditional
UPDATE, so two clicks (or two users) cannot queue it twice; the task on the instance's host then
does the work and settles the state (see instances.services.machines). The operations themselves
are declared in instances.power_operations.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from instances.access import project_role
from instances.choices import Outcome
from instances.errors import ActionRefused
from instances.models import Instance
from instances.power_operations import POWER, PowerOperation
from instances.services.audit import audit_record
from instances.services.queueing import enqueue_host_task
from instances.services.snapshots import reverting_disks


def instance_power(
    *, instance: Instance, actor: AbstractBaseUser | None, operation: PowerOperation
) -> None:
    """Check the operation's rule (for a user; the reconciler acts as no one), claim it, and
    queue its task once committed."""
    if actor is not None:
        allowed = operation.rule(instance, project_role(actor, instance.project))
        if not allowed:
            audit_record(
                actor=actor,
                action=operation.audit_action,
                project=instance.project,
                target=instance,
                outcome=Outcome.DENIED,
                message=allowed.reason,
            )
            raise ActionRefused(allowed.reason)
    now = timezone.now()
    with transaction.atomic():
        claimed = Instance.objects.filter(pk=instance.pk, power_state__in=operation.sources).update(
            power_state=operation.transitional,
            power_message="",
            state_changed_at=now,
            restarts_in_a_row=0,  # the user took over: a crash after this starts a new series
        )
        if not claimed:
            rows = Instance.objects.filter(pk=instance.pk).values_list("power_state", flat=True)
            if (state := rows.first()) is None:
                raise ActionRefused(f"Instance {instance.name} was deleted.")
            instance.power_state = state
            raise ActionRefused(f"The instance is {instance.get_power_state_display().lower()}.")
        # read under the claim's row lock, which a revert takes too: one of the two waits
        if operation.refused_while_reverting and (disks := reverting_disks(instance.pk)):
            raise ActionRefused(
                f"{', '.join(disks)} is being reverted to a snapshot; start the instance after."
            )
        audit_record(
            actor=actor, action=operation.audit_action, project=instance.project, target=instance
        )
        # the claim's time names this claim: the task acts only while it still holds
        enqueue_host_task(instance, operation.task, instance.pk, now.isoformat())
    instance.power_state = operation.transitional
    instance.power_message = ""


# Shorthands for the callers that name one operation (run strategies, schedules, the demo).
def instance_start(*, instance: Instance, actor: AbstractBaseUser | None) -> None:
    instance_power(instance=instance, actor=actor, operation=POWER["start"])


def instance_shutdown(*, instance: Instance, actor: AbstractBaseUser | None) -> None:
    instance_power(instance=instance, actor=actor, operation=POWER["shutdown"])


def instance_force_stop(*, instance: Instance, actor: AbstractBaseUser | None) -> None:
    instance_power(instance=instance, actor=actor, operation=POWER["force_stop"])


def instance_restart(*, instance: Instance, actor: AbstractBaseUser | None) -> None:
    instance_power(instance=instance, actor=actor, operation=POWER["restart"])
