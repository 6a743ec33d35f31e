from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from instances.models import AuditEvent, Membership, Project


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "member_count", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Project]:
        return super().get_queryset(request).annotate(member_total=Count("memberships"))

    @admin.display(description="Members", ordering="member_total")
    def member_count(self, project: Project) -> int:
        return project.member_total  # type: ignore[attr-defined]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "project", "role", "created_at"]
    list_filter = ["role", "project"]
    search_fields = ["user__username", "project__name", "project__slug"]
    autocomplete_fields = ["user", "project"]


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """The audit trail is read-only: it records what happened."""

    list_display = ["created_at", "actor_name", "action", "target_repr", "outcome", "project"]
    list_filter = ["outcome", "action", "project"]
    search_fields = ["actor_name", "action", "target_repr", "message"]
    date_hierarchy = "created_at"

    def has_add_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False
