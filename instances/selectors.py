"""Reads of the instances app."""

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Prefetch, Q, QuerySet

from instances.models import AuditEvent, Instance, Membership, NetworkInterface, Project


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


def instance_list(
    project: Project, *, state: str = "", zone: str = "", subnet: str = "", q: str = ""
) -> QuerySet[Instance]:
    """The instance list with what each row shows, in a fixed number of queries."""
    instances = Instance.objects.filter(project=project).prefetch_related(
        Prefetch(
            "nics", queryset=NetworkInterface.objects.select_related("subnet").order_by("index")
        )
    )
    if state:
        instances = instances.filter(power_state=state)
    if zone:
        instances = instances.filter(zone=zone)
    if subnet:
        instances = instances.filter(nics__subnet_id=subnet).distinct()
    if q:
        instances = instances.filter(
            Q(name__icontains=q) | Q(nics__ipv4=q) | Q(nics__mac__iexact=q)
        ).distinct()
    return instances.order_by("name")


def instance_events(instance: Instance) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(
        project_id=instance.project_id, target_type="instance", target_id=str(instance.pk)
    ).select_related("actor")
