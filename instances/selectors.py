"""Reads of the instances app."""

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from instances.models import AuditEvent, Membership, Project


def projects_for_user(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Project]:
    if not user.is_authenticated:
        return Project.objects.none()
    if getattr(user, "is_superuser", False):
        return Project.objects.all()
    return Project.objects.filter(memberships__user_id=user.pk)


def project_members(project: Project) -> QuerySet[Membership]:
    return project.memberships.select_related("user").order_by("user__username")


def project_audit_events(project: Project) -> QuerySet[AuditEvent]:
    return project.audit_events.select_related("actor")
