"""Who may see and do what: the one place views, API endpoints and consoles check access.

An object of a project the user is not a member of does not exist for them (404). A member whose
role is too low for the action gets 403, because they can already see the object.
"""

from typing import TypeVar

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import Http404

from instances.choices import Role
from instances.models import (
    Disk,
    Image,
    ImageImport,
    Instance,
    Membership,
    Project,
    SSHKey,
    Subnet,
)

User = AbstractBaseUser | AnonymousUser
ROLES_HELD = "_project_roles"  # the user object's attribute that holds the roles read
M = TypeVar("M", bound=models.Model)


def project_role(user: User, project: Project) -> Role | None:
    """The user's role in the project (admin for superusers, None for outsiders).

    Cached on the user object, as ModelBackend caches permissions; forget_roles() drops it."""
    if not user.is_authenticated or not user.is_active:
        return None
    if getattr(user, "is_superuser", False):
        return Role.ADMIN
    roles: dict[int, Role | None] | None = getattr(user, ROLES_HELD, None)
    if roles is None:
        roles = {}
        setattr(user, ROLES_HELD, roles)
    if project.pk not in roles:
        role = (  # unordered: the models' orderings would join projects and users for nothing
            Membership.objects.filter(project=project, user_id=user.pk)
            .order_by()
            .values_list("role", flat=True)
            .first()
        )
        roles[project.pk] = Role(role) if role else None
    return roles[project.pk]


def forget_roles(user: User) -> None:
    """Make the next project_role() of this user object read the database."""
    if hasattr(user, ROLES_HELD):
        delattr(user, ROLES_HELD)


def require_role(user: User, project: Project, required: Role) -> Role:
    """Return the user's role, or raise 404 for outsiders and 403 for too low a role."""
    role = project_role(user, project)
    if role is None:
        raise Http404("No such project.")
    if not role.allows(required):
        raise PermissionDenied(f"This needs the {required.label.lower()} role in {project.name}.")
    return role


def project_for_user(user: User, slug: str, required: Role = Role.VIEWER) -> tuple[Project, Role]:
    """The project named by slug and the user's role in it, checked against `required`."""
    project = Project.objects.filter(slug=slug).order_by().first()
    if project is None:
        raise Http404("No such project.")
    return project, require_role(user, project, required)


def object_for_user(
    queryset: models.QuerySet[M], user: User, required: Role = Role.VIEWER, **lookup: object
) -> tuple[M, Role]:
    """An object with a `project` foreign key, checked like its project.

    The per-type helpers (instance_for_user, subnet_for_user, ...) are thin calls of this one.
    """
    obj = queryset.select_related("project").filter(**lookup).order_by().first()  # one at most
    if obj is None:
        raise Http404("Not found.")
    return obj, require_role(user, obj.project, required)  # type: ignore[attr-defined]


def instance_for_user(
    user: User, project_slug: str, pk: int, required: Role = Role.VIEWER
) -> tuple[Instance, Role]:
    return object_for_user(
        Instance.objects.all(), user, required, pk=pk, project__slug=project_slug
    )


def subnet_for_user(
    user: User, project_slug: str, pk: int, required: Role = Role.VIEWER
) -> tuple[Subnet, Role]:
    return object_for_user(Subnet.objects.all(), user, required, pk=pk, project__slug=project_slug)


def ssh_key_for_user(
    user: User, project_slug: str, pk: int, required: Role = Role.VIEWER
) -> tuple[SSHKey, Role]:
    return object_for_user(SSHKey.objects.all(), user, required, pk=pk, project__slug=project_slug)


def image_for_user(
    user: User, project_slug: str, pk: int, required: Role = Role.VIEWER
) -> tuple[Image, Role]:
    """A project's own image (shared ones are the admin's)."""
    return object_for_user(Image.objects.all(), user, required, pk=pk, project__slug=project_slug)


def image_import_for_user(
    user: User, project_slug: str, pk: int, required: Role = Role.VIEWER
) -> tuple[ImageImport, Role]:
    return object_for_user(
        ImageImport.objects.all(), user, required, pk=pk, project__slug=project_slug
    )


def disk_for_user(
    user: User, project_slug: str, pk: int, required: Role = Role.VIEWER
) -> tuple[Disk, Role]:
    return object_for_user(Disk.objects.all(), user, required, pk=pk, project__slug=project_slug)
