"""People in the admin: users, their API tokens and their login history (django-axes).

A staff user who is not a superuser sees only the people who share a project with them (login
history: only where they are the project's admin), their own tokens, and changes only their own
name, e-mail and password: flags, groups and permissions are the superusers' to change.
"""

from typing import Any

from axes.admin import AccessAttemptAdmin, AccessFailureLogAdmin, AccessLogAdmin
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.db.models import Model, QuerySet
from django.http import HttpRequest

from instances.admin_scope import HiddenOutsideScope, user_projects, users_sharing_a_project
from instances.choices import Role
from instances.models import ApiToken

RIGHTS_FIELDS = ["is_active", "is_staff", "is_superuser", "groups", "user_permissions"]
# Choosing a membership's user (page or inline), a project admin also finds anyone by their
# exact user name: members can be added without a list of every user to browse.
MEMBER_AUTOCOMPLETE = ("instances", "membership", "user")

for model in (User, Group, AccessAttempt, AccessLog, AccessFailureLog):
    if admin.site.is_registered(model):
        admin.site.unregister(model)


def _superuser(request: HttpRequest) -> bool:
    return bool(request.user.is_superuser)


@admin.register(User)
class ScopedUserAdmin(HiddenOutsideScope, UserAdmin):
    """Staff see the people they share a project with; only superusers add, delete, or change
    anyone's rights (staying staff, becoming superuser, groups, permissions)."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[User]:
        people = users_sharing_a_project(request.user, Role.VIEWER)
        return super().get_queryset(request).filter(pk__in=people.values("pk"))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[User], search_term: str
    ) -> tuple[QuerySet[User], bool]:
        found, distinct = super().get_search_results(request, queryset, search_term)
        if _superuser(request) or not self._member_autocomplete(request) or not search_term:
            return found, distinct
        if not user_projects(request.user, Role.ADMIN).exists():
            return found, distinct
        named = User.objects.filter(username=search_term.strip(), is_active=True)
        return found | named, distinct

    @staticmethod
    def _member_autocomplete(request: HttpRequest) -> bool:
        asked = tuple(request.GET.get(key, "") for key in ("app_label", "model_name", "field_name"))
        return request.path.endswith("/autocomplete/") and asked == MEMBER_AUTOCOMPLETE

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        if _superuser(request) or obj is None:
            return fields
        return [*fields, *RIGHTS_FIELDS, "last_login", "date_joined"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and _superuser(request)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        if not super().has_change_permission(request, obj):
            return False
        return _superuser(request) or obj is None or obj.pk == request.user.pk

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return super().has_delete_permission(request, obj) and _superuser(request)


@admin.register(Group)
class SuperuserGroupAdmin(GroupAdmin):
    """A group grants permissions, so only superusers make or change one."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and _superuser(request)

    def has_change_permission(self, request: HttpRequest, obj: Group | None = None) -> bool:
        return super().has_change_permission(request, obj) and _superuser(request)

    def has_delete_permission(self, request: HttpRequest, obj: Group | None = None) -> bool:
        return super().has_delete_permission(request, obj) and _superuser(request)


@admin.register(ApiToken)
class ApiTokenAdmin(HiddenOutsideScope):
    """Tokens are made with `manage.py api_token create`, the one place the plaintext shows;
    here they can be read, given an expiry, or deleted to revoke them: a staff user who is not a
    superuser sees only their own, since a token acts in every project of its user."""

    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "expires_at"]
    list_filter = ["expires_at"]
    search_fields = ["name", "prefix", "user__username"]
    list_select_related = ["user"]
    readonly_fields = ["user", "prefix", "token_hash", "created_at", "last_used_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiToken]:
        tokens = super().get_queryset(request)
        return tokens if _superuser(request) else tokens.filter(user_id=request.user.pk)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


class LoginHistoryScope(HiddenOutsideScope):
    """axes' records of logins and bad tokens: a project admin reads their members', and only
    superusers delete one (which lifts a lockout) or read the records of bad tokens."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        records = super().get_queryset(request)
        if _superuser(request):
            return records
        people = users_sharing_a_project(request.user, Role.ADMIN)
        return records.filter(username__in=people.values("username"))

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        return super().get_actions(request) if _superuser(request) else {}

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return super().has_change_permission(request, obj) and _superuser(request)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return super().has_delete_permission(request, obj) and _superuser(request)


@admin.register(AccessAttempt)
class ScopedAccessAttemptAdmin(LoginHistoryScope, AccessAttemptAdmin):
    pass


@admin.register(AccessLog)
class ScopedAccessLogAdmin(LoginHistoryScope, AccessLogAdmin):
    pass


@admin.register(AccessFailureLog)
class ScopedAccessFailureLogAdmin(LoginHistoryScope, AccessFailureLogAdmin):
    pass
