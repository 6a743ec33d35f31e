"""A VMI that ended by itself, recorded on its instance as a QEMU host records a guest's stop:
how it ended (its phase), and whether KubeVirt runs it again by the run strategy it enforces.

KubeVirt restarts; the console only writes down what happened, with the same audit record."""

from django.db import transaction
from django.db.models import F

from instances.backends.base import ExitKind
from instances.choices import LastExit, Outcome, PowerState
from instances.models import Instance
from instances.services.audit import audit_record
from instances.services.machines import settle
from instances.services.reconciler import restart_wanted

ENDED = {"Succeeded": ExitKind.GUEST_POWEROFF, "Failed": ExitKind.CRASHED}


def vmi_ended(instance_id: int, phase: str) -> bool:
    """Record the end of a running instance's VMI in `phase`; False when the instance was not
    running (a stop the console asked for settles itself, with its own last exit)."""
    exit_kind = ENDED[phase]
    with transaction.atomic():
        instance = (
            Instance.objects.select_for_update()
            .select_related("project")
            .filter(pk=instance_id, power_state=PowerState.RUNNING)
            .first()
        )
        if instance is None:
            return False
        last_exit = LastExit(exit_kind.value)
        restart = restart_wanted(instance.run_strategy, exit_kind)
        message = f"{last_exit.label}; run strategy {instance.run_strategy}."
        if restart:  # KubeVirt runs it again: it stays Running to the console
            Instance.objects.filter(pk=instance.pk).update(
                last_exit=last_exit, auto_restarts=F("auto_restarts") + 1
            )
        else:
            settle(instance.pk, PowerState.RUNNING, PowerState.STOPPED, last_exit=last_exit)
        audit_record(
            actor=None,
            action="instance.auto_restart" if restart else "instance.stopped",
            project=instance.project,
            target=instance,
            outcome=Outcome.FAILURE if exit_kind == ExitKind.CRASHED else Outcome.SUCCESS,
            message=message,
        )
    return True
