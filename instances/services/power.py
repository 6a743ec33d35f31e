"""Power operations as users ask for them: check, claim the transition, queue the work.

Each request moves the instance into a transitional state with a conditional UPDATE, so two
clicks (or two users) cannot queue the same operation twice; the task on the instance's host
then does the work and settles the state (see instances.services.machines).
"""

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from instances import actions
from instances.access import project_role
from instances.choices import Outcome, PowerState
from instances.errors import ActionRefused
from instances.models import Instance
from instances.services.audit import audit_record
from instances.services.queueing import enqueue_host_task
from instances.services.snapshots import reverting_disks

# action → (states it may start from, transitional state, task name)
OPERATIONS = {
    "start": (actions.STOPPED_STATES, PowerState.STARTING, "instances.machine_start"),
    "shutdown": ((PowerState.RUNNING,), PowerState.STOPPING, "instances.machine_shutdown"),
    "force_stop": (
        (PowerState.RUNNING, PowerState.STARTING, PowerState.STOPPING, PowerState.RESTARTING),
        PowerState.STOPPING,
        "instances.machine_force_stop",
    ),
    "restart": ((PowerState.RUNNING,), PowerState.RESTARTING, "instances.machine_restart"),
}


def _request(instance: Instance, actor: AbstractBaseUser | None, action: str) -> None:
    if actor is not None:
        allowed = actions.RULES[action](instance, project_role(actor, instance.project))
        if not allowed:
            audit_record(
                actor=actor,
                action=f"instance.{action}",
                project=instance.project,
                target=instance,
                outcome=Outcome.DENIED,
                message=allowed.reason,
            )
            raise ActionRefused(allowed.reason)
    sources, transitional, task = OPERATIONS[action]
    now = timezone.now()
    with transaction.atomic():
        claimed = Instance.objects.filter(pk=instance.pk, power_state__in=sources).update(
            power_state=transitional,
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
        if action == "start" and (disks := reverting_disks(instance.pk)):
            raise ActionRefused(
                f"{', '.join(disks)} is being reverted to a snapshot; start the instance after."
            )
        audit_record(
            actor=actor, action=f"instance.{action}", project=instance.project, target=instance
        )
        # the claim's time names this claim: the task acts only while it still holds
        enqueue_host_task(instance, task, instance.pk, now.isoformat())
    instance.power_state = transitional
    instance.power_message = ""


def instance_start(*, instance: Instance, actor: AbstractBaseUser | None) -> None:
    _request(instance, actor, "start")


def instance_shutdown(*, instance: Instance, actor: AbstractBaseUser | None) -> None:
    """ACPI shutdown: the guest OS powers itself off cleanly."""
    _request(instance, actor, "shutdown")


def instance_force_stop(*, instance: Instance, actor: AbstractBaseUser | None) -> None:
    """Cut the power at once, for an unresponsive guest."""
    _request(instance, actor, "force_stop")


def instance_restart(*, instance: Instance, actor: AbstractBaseUser | None) -> None:
    _request(instance, actor, "restart")
