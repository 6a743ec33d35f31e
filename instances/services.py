"""Writes of the instances app. Views, tasks, the admin and commands all go through these."""

from django.contrib.auth.models import AbstractBaseUser, User
from django.db import models, transaction

from instances.choices import Outcome, Role
from instances.models import AuditEvent, Membership, Project


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
    """Write one audit event naming the acting user (None for the system itself)."""
    return AuditEvent.objects.create(
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


@transaction.atomic
def project_create(*, slug: str, name: str, actor: AbstractBaseUser | None) -> Project:
    project = Project.objects.create(slug=slug, name=name)
    audit_record(actor=actor, action="project.create", project=project, target=project)
    return project


@transaction.atomic
def membership_set(
    *, project: Project, user: AbstractBaseUser, role: Role, actor: AbstractBaseUser | None
) -> Membership:
    """Give the user this role in the project, adding them as a member if they were not one."""
    membership, created = Membership.objects.update_or_create(
        project=project, user=user, defaults={"role": role}
    )
    audit_record(
        actor=actor,
        action="membership.add" if created else "membership.change",
        project=project,
        target=membership,
        detail={"user": user.get_username(), "role": str(role)},
    )
    return membership
