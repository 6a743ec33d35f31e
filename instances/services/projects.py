"""Projects and their members."""

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from instances.access import forget_roles
from instances.choices import Role
from instances.models import Membership, Project
from instances.services.audit import audit_record


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
    forget_roles(user)
    audit_record(
        actor=actor,
        action="membership.add" if created else "membership.change",
        project=project,
        target=membership,
        detail={"user": user.get_username(), "role": str(role)},
    )
    return membership
