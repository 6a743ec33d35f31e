"""Task messages waiting for the broker, shown to superusers only (they name every project's
work); the outbox relay, not a person, sends and removes them."""

from django.contrib import admin
from django.http import HttpRequest

from instances.models import OutboxMessage


@admin.register(OutboxMessage)
class OutboxMessageAdmin(admin.ModelAdmin):
    list_display = ["task", "queue", "eta", "created_at"]
    search_fields = ["task", "queue"]

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return bool(request.user.is_superuser)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
