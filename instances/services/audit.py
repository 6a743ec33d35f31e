from django.contrib.auth.models import AbstractBaseUser, User
from django.db import models

from instances.choices import Outcome
from instances.disk_full import unless_disk_full
from instances.models import AuditEvent, Project


def audit_record(
    *,
    actor: AbstractBaseUser | None,
    action: str,
    project: Project | None = None,
    target: models.Model | None = None,
    outcome: Outcome = Outcome.SUCCESS,
    message: str = "",
    detail: dict | None = None,
) -> AuditEvent:
    """Write one audit event naming the acting user (None for the system itself). A refusal
    still answers with its reason on a full disk, its event then only logged."""
    event = AuditEvent(
        project=project,
        actor=actor if isinstance(actor, User) and actor.pk else None,
        actor_name=actor.get_username() if actor is not None else "",
        action=action,
        target_type=(target._meta.model_name or "") if target is not None else "",
        target_id=str(target.pk) if target is not None else "",
        target_repr=str(target)[:200] if target is not None else "",
        outcome=outcome,
        message=message,
        detail=detail or {},
    )
    if outcome == Outcome.DENIED:
        with unless_disk_full(f"the audit of a refused {action}"):
            event.save()
        return event
    event.save()
    return event
