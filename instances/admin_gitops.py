"""Git sources in the admin: the deploy key or token is write-only (stored encrypted, never
shown); admins of a project manage its source. Syncs and webhook deliveries are read-only
records."""

import secrets
from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from instances.admin_scope import ProjectScopedAdmin
from instances.choices import GitAuth, Role
from instances.gitops import git
from instances.gitops.services import CREDENTIAL_FOR_NEW_URL
from instances.models import GitSource, GitSync, GitWebhookDelivery


class GitSourceAdminForm(forms.ModelForm):
    new_credential = forms.CharField(
        label="Deploy key or token",
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off"}),
        help_text="Leave empty to keep the stored one (it is encrypted and never shown).",
    )

    class Meta:
        model = GitSource
        fields = ["project", "url", "branch", "path", "auth", "actor", "new_credential"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("url") and cleaned.get("auth"):
            problem = git.url_problem(cleaned["url"], cleaned["auth"])
            if problem:
                self.add_error("url", problem)
        if cleaned.get("branch") and git.branch_problem(cleaned["branch"]):
            self.add_error("branch", git.branch_problem(cleaned["branch"]))
        kept = self.instance.pk and self.instance.credential and cleaned.get("auth") != GitAuth.NONE
        moved = cleaned.get("url") != self.instance.url or cleaned.get("auth") != self.instance.auth
        if kept and moved and not cleaned.get("new_credential", "").strip():
            self.add_error("new_credential", CREDENTIAL_FOR_NEW_URL)
        return cleaned

    def save(self, commit: bool = True) -> GitSource:
        source = super().save(commit=False)
        if source.auth == GitAuth.NONE:
            source.credential = ""
        elif self.cleaned_data.get("new_credential", "").strip():
            source.credential = self.cleaned_data["new_credential"].strip()
        if not source.webhook_secret:
            source.webhook_secret = secrets.token_urlsafe(32)
        if commit:
            source.save()
        return source


class GitSyncInline(admin.TabularInline):
    model = GitSync
    fields = ["started_at", "trigger", "status", "sha", "subject", "message"]
    readonly_fields = ["started_at", "trigger", "status", "sha", "subject", "message"]
    extra = 0
    max_num = 0
    can_delete = False
    ordering = ["-started_at"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(GitSource)
class GitSourceAdmin(ProjectScopedAdmin):
    form = GitSourceAdminForm
    change_role = Role.ADMIN
    list_display = ["project", "url", "branch", "path", "auth", "applied_sha", "checked_at"]
    list_filter = ["auth"]
    search_fields = ["url", "project__slug"]
    readonly_fields = ["webhook_id", "applied_sha", "checked_at"]
    inlines = [GitSyncInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        """Syncs act as the admin who saved the source, as on its page; only a superuser picks
        another user (any other choice would lend that user's rights)."""
        fields = list(super().get_readonly_fields(request, obj))
        return fields if request.user.is_superuser else [*fields, "actor"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not request.user.is_superuser:
            obj.actor = request.user
        super().save_model(request, obj, form, change)


@admin.register(GitSync)
class GitSyncAdmin(ProjectScopedAdmin):
    """Syncs are records: shown, never changed."""

    project_path = "source__project"
    list_display = ["started_at", "source", "trigger", "status", "sha", "subject"]
    list_filter = ["status", "trigger"]
    search_fields = ["sha", "subject", "source__project__slug"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(GitWebhookDelivery)
class GitWebhookDeliveryAdmin(ProjectScopedAdmin):
    """The webhook deliveries kept to refuse replays: shown, never changed."""

    project_path = "source__project"
    list_display = ["received_at", "source", "key"]
    search_fields = ["source__project__slug"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
