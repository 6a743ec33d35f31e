"""The admin follows project roles: a staff user sees only the rows of their projects and
changes one only where their role there allows it (superusers see and change everything).

Django's model permissions still apply on top: the role narrows what they grant, never widens.
"""

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import models
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse

from instances.access import project_role
from instances.choices import Role
from instances.models import Membership, Project


def roles_allowing(required: Role) -> list[str]:
    return [role.value for role in Role if role.allows(required)]


def user_projects(user: AbstractBaseUser | AnonymousUser, required: Role) -> QuerySet[Project]:
    """The projects where the user holds `required` or a higher role."""
    if getattr(user, "is_superuser", False):
        return Project.objects.all()
    if user.pk is None:
        return Project.objects.none()
    members = Membership.objects.filter(user_id=user.pk, role__in=roles_allowing(required))
    return Project.objects.filter(pk__in=members.values("project_id"))


def users_sharing_a_project(
    user: AbstractBaseUser | AnonymousUser, required: Role = Role.VIEWER
) -> QuerySet[Any]:
    """The user and the members of the projects where the user holds `required` or higher."""
    users = get_user_model()._default_manager.all()
    if getattr(user, "is_superuser", False):
        return users
    if user.pk is None:
        return users.none()
    projects = user_projects(user, required)
    members = Membership.objects.filter(project__in=projects).values("user_id")
    return users.filter(Q(pk=user.pk) | Q(pk__in=members))


class HiddenOutsideScope(admin.ModelAdmin):
    """A row outside the user's `get_queryset` answers 404 on every page of its own, as on the
    product's pages (Django would redirect to the index with "does not exist")."""

    def _mine_or_404(self, request: HttpRequest, object_id: str) -> None:
        """A row outside the scope does not exist for the user, as on the pages."""
        if self.get_object(request, unquote(object_id)) is None:
            raise Http404("Not found.")

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:  # fmt: skip
        self._mine_or_404(request, object_id)
        return super().change_view(request, object_id, form_url, extra_context)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        self._mine_or_404(request, object_id)
        return super().delete_view(request, object_id, extra_context)

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        self._mine_or_404(request, object_id)
        return super().history_view(request, object_id, extra_context)


class ProjectScopedAdmin(HiddenOutsideScope):
    """A ModelAdmin of a model that belongs to a project through `project_path` ("project",
    "instance__project", "" for Project itself). Rows of no project (shared images, say) are
    shown to every staff user and changed by superusers only."""

    project_path = "project"
    view_role = Role.VIEWER
    change_role = Role.OPERATOR
    delete_role = Role.ADMIN

    def _project_of(self, obj: models.Model) -> Project | None:
        if not self.project_path:
            return obj  # type: ignore[return-value]
        found: Any = obj
        for part in self.project_path.split("__"):
            found = getattr(found, part, None)
            if found is None:
                return None
        return found  # type: ignore[no-any-return]

    def _role_allows(self, request: HttpRequest, obj: models.Model | None, required: Role) -> bool:
        if request.user.is_superuser or obj is None:
            return True
        project = self._project_of(obj)
        if project is None:
            return required == Role.VIEWER
        role = project_role(request.user, project)
        return bool(role and role.allows(required))

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        projects = user_projects(request.user, self.view_role)
        if not self.project_path:
            return queryset.filter(pk__in=projects.values("pk"))
        mine = Q(**{f"{self.project_path}__in": projects})
        return queryset.filter(mine | Q(**{f"{self.project_path}__isnull": True}))

    def get_list_filter(self, request: HttpRequest) -> Any:
        """Filters by project list the projects of the rows shown, never every project's name."""
        return [
            (name, admin.RelatedOnlyFieldListFilter)
            if isinstance(name, str) and name.endswith("project")
            else name
            for name in super().get_list_filter(request)
        ]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_view_permission(request, obj) and self._role_allows(
            request, obj, self.view_role
        )

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_change_permission(request, obj) and self._role_allows(
            request, obj, self.change_role
        )

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_delete_permission(request, obj) and self._role_allows(
            request, obj, self.delete_role
        )

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        if not super().has_add_permission(request, *args):  # type: ignore[call-arg]
            return False
        if not self.project_path:
            return bool(request.user.is_superuser)  # a new project has no members yet
        return user_projects(request.user, self.change_role).exists()

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        """Choices from the projects the user may change things in only."""
        kwargs.setdefault("queryset", self._scoped_choices(db_field, request))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        kwargs.setdefault("queryset", self._scoped_choices(db_field, request))
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def _scoped_choices(self, db_field: Any, request: HttpRequest) -> QuerySet[Any]:
        related = db_field.remote_field.model
        queryset = related._default_manager.all()
        if request.user.is_superuser:
            return queryset
        projects = user_projects(request.user, self.change_role)
        if related is Project:
            return queryset.filter(pk__in=projects.values("pk"))
        names = {field.name for field in related._meta.get_fields()}
        if "project" in names:
            return queryset.filter(Q(project__in=projects) | Q(project__isnull=True))
        return queryset
