"""What the console learns about machines it does not watch itself.

QEMU machines are watched by the host reconciler (services.reconciler.reconcile_host). A cloud VM
can be stopped, started or terminated in the cloud's own console; the periodic refresh of the app
that made it reads its state back and reports it here.
"""

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from instances.choices import POWER_TRANSITIONAL, LastExit, Outcome, PowerState
from instances.models import Instance
from instances.services.audit import audit_record

# A transitional state older than this lost its worker: what the cloud reports settles it.
STUCK_AFTER = timedelta(seconds=300)

AUDIT_ACTIONS = {
    PowerState.RUNNING: "instance.started",
    PowerState.STOPPED: "instance.stopped",
    PowerState.FAILED: "instance.failed",
}


def instance_power_observe(
    *,
    instance: Instance,
    state: PowerState,
    last_exit: LastExit = LastExit.NONE,
    message: str = "",
) -> bool:
    """Set the instance's power state to what its backend reports; True when it changed.

    An operation under way (younger than STUCK_AFTER) or settled since the caller's read wins.
    """
    current = instance.power_state
    now = timezone.now()
    if current in POWER_TRANSITIONAL and instance.state_changed_at > now - STUCK_AFTER:
        return False
    if current == state and (state != PowerState.FAILED or instance.power_message == message):
        return False
    fields: dict[str, object] = {
        "power_state": state,
        "power_message": message[:300],
        "state_changed_at": now,
    }
    if state != PowerState.RUNNING:
        fields["last_exit"] = last_exit
    with transaction.atomic():
        if not Instance.objects.filter(pk=instance.pk, power_state=current).update(**fields):
            return False
        audit_record(
            actor=None,
            action=AUDIT_ACTIONS[state],
            project=instance.project,
            target=instance,
            outcome=Outcome.FAILURE if state == PowerState.FAILED else Outcome.SUCCESS,
            message=message
            or f"Reported {PowerState(state).label.lower()} by its {instance.backend} backend.",
        )
    return True
