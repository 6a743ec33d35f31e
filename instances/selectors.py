"""Reads of the instances app."""

from typing import TypeVar

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import QuerySet

from instances.models import (
    AuditEvent,
    Instance,
    Membership,
    NetworkInterface,
    Project,
)

M = TypeVar("M", bound=models.Model)


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


def instance_list(project: Project) -> QuerySet[Instance]:
    """The API list's instances; InstanceFilterSet filters them, ssh_key_ids() adds their keys."""
    return Instance.objects.filter(project=project)


def ssh_key_ids(instances: list[Instance]) -> None:
    """Sets each instance's `ssh_key_ids` (by key name, as `ssh_keys.all()`) in one query: a
    prefetch would build a related manager and a key object per row for a list of ids."""
    keys: dict[int, list[int]] = {instance.pk: [] for instance in instances}
    rows = (
        Instance.ssh_keys.through.objects.filter(instance_id__in=keys)
        .order_by("sshkey__name", "sshkey_id")
        .values_list("instance_id", "sshkey_id")
    )
    for instance_id, key_id in rows:
        keys[instance_id].append(key_id)
    for instance in instances:
        setattr(instance, "ssh_key_ids", keys[instance.pk])  # noqa: B010


INSTANCE_ROW_FIELDS = ("pk", "name", "power_state", "zone", "vcpus", "memory_gb", "run_strategy")


def instance_table(project: Project) -> QuerySet[Instance, dict[str, object]]:
    """The list page's rows as plain values: a page of thousands builds no model objects."""
    return Instance.objects.filter(project=project).values(*INSTANCE_ROW_FIELDS)


def instance_addresses(instance_ids: list[int]) -> dict[int, list[tuple[str, str]]]:
    """(address, subnet name) of each instance's NICs, in interface order, in one query."""
    addresses: dict[int, list[tuple[str, str]]] = {pk: [] for pk in instance_ids}
    rows = (
        NetworkInterface.objects.filter(instance_id__in=instance_ids)
        .order_by("instance_id", "index")
        .values_list("instance_id", "ipv4", "ipv6", "subnet__name")
    )
    for instance_id, ipv4, ipv6, subnet_name in rows:
        addresses[instance_id].append((ipv4 or ipv6 or "-", subnet_name))
    return addresses


def instance_events(instance: Instance) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(
        project_id=instance.project_id, target_type="instance", target_id=str(instance.pk)
    ).select_related("actor")


def chosen(queryset: QuerySet[M], pk: int, field: str, message: str) -> M:
    """The object a form or body field names, or a field error when there is no such object
    among those the request may use."""
    obj = queryset.filter(pk=pk).first()
    if obj is None:
        raise ValidationError({field: message})
    return obj
