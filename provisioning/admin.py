from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from instances.admin_scope import ProjectScopedAdmin
from instances.choices import Role
from provisioning.choices import JobStatus
from provisioning.clouds import cloud_for, provider_choices
from provisioning.endpoints import url_problem as endpoint_url_problem
from provisioning.models import CloudAccount, JobInstance, JobStep, ProvisioningJob


class CloudAccountForm(forms.ModelForm):
    """The secret is write-only: typed in to set or replace it, never shown back."""

    provider = forms.ChoiceField(choices=provider_choices)

    new_secret_access_key = forms.CharField(
        label="Secret access key, or service account key (GCP)",
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="AWS: the secret access key. GCP: the service account key's JSON. Leave empty "
        "to keep the stored secret (it is encrypted and never shown).",
    )

    endpoint_url = forms.URLField(label="Endpoint URL", required=False, assume_scheme="https")

    class Meta:
        model = CloudAccount
        fields = [
            "project", "provider", "name", "default_region", "access_key_id",
            "new_secret_access_key", "role_arn", "gcp_project", "endpoint_url", "sandbox",
        ]  # fmt: skip

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        url, sandbox = cleaned.get("endpoint_url") or "", bool(cleaned.get("sandbox"))
        if url and (problem := endpoint_url_problem(url, sandbox=sandbox)):
            self.add_error("endpoint_url", problem)
        secret = cleaned.get("new_secret_access_key", "")
        if secret and (provider := cleaned.get("provider")):
            cloud = cloud_for(provider)
            problem, identity = cloud.secret_check(secret, getattr(self, "user", None))
            if problem:
                self.add_error("new_secret_access_key", problem)
            elif identity:  # the key names its account (GCP): kept as the access key id
                cleaned["access_key_id"] = identity
        return cleaned

    def save(self, commit: bool = True) -> CloudAccount:
        account = super().save(commit=False)
        if self.cleaned_data.get("new_secret_access_key"):
            account.secret_access_key = self.cleaned_data["new_secret_access_key"]
        if commit:
            account.save()
        return account


@admin.register(CloudAccount)
class CloudAccountAdmin(ProjectScopedAdmin):
    """A project's admins manage its accounts; the endpoint URL is a superuser's setting (the
    console sends signed requests there)."""

    change_role = Role.ADMIN
    form = CloudAccountForm
    list_display = ["name", "project", "provider", "default_region", "sandbox", "last_check_ok"]
    list_filter = ["provider", "sandbox", "project"]
    search_fields = ["name", "project__name", "access_key_id"]
    readonly_fields = ["has_secret", "last_checked_at", "last_check_ok", "last_check_message"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        shown = list(self.readonly_fields)
        return shown if request.user.is_superuser else [*shown, "endpoint_url", "sandbox"]

    def get_form(  # type: ignore[override]
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form: Any = super().get_form(request, obj, change, **kwargs)
        form.user = request.user  # whose key's token_uri is checked
        return form

    @admin.display(boolean=True, description="Secret stored")
    def has_secret(self, account: CloudAccount) -> bool:
        return account.has_secret


class JobStepInline(admin.TabularInline):
    model = JobStep
    extra = 0
    can_delete = False
    fields = ("position", "phase", "name", "status", "attempts", "started_at", "finished_at")
    readonly_fields = fields


@admin.register(ProvisioningJob)
class ProvisioningJobAdmin(ProjectScopedAdmin):
    """Jobs change only through the pipeline and its services; the admin shows them."""

    list_display = ["name", "project", "provider", "region", "pool_mode", "status", "created_at"]
    list_filter = ["status", "provider", "pool_mode", "project"]
    search_fields = ["name", "token", "project__name"]
    # what names and shapes the cloud resources (and the VMs' instances) is fixed at creation
    readonly_fields = [
        "name", "provider", "region", "pool_mode", "account", "token", "status", "phase",
        "message", "config", "finished_at",
    ]  # fmt: skip
    inlines = [JobStepInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs come from the wizard and the API, which validate the whole request

    def has_delete_permission(
        self, request: HttpRequest, obj: ProvisioningJob | None = None
    ) -> bool:
        """Only the record of a job torn down already: deleting a live job's row would leave its
        cloud resources and VMs' instances running with nothing to tear them down (the job's
        Delete does that). Never in bulk, where the rule could not be applied to each job."""
        return (
            obj is not None
            and obj.status == JobStatus.DELETED
            and super().has_delete_permission(request, obj)
        )


@admin.register(JobStep)
class JobStepAdmin(ProjectScopedAdmin):
    project_path = "job__project"
    list_display = ["job", "position", "name", "phase", "status", "attempts", "finished_at"]
    list_filter = ["status", "name", "phase"]
    search_fields = ["job__name", "name", "message"]
    readonly_fields = ["log"]


@admin.register(JobInstance)
class JobInstanceAdmin(ProjectScopedAdmin):
    project_path = "job__project"
    """Written by stepRegisterSpace and gone with the instance: shown, not edited."""

    list_display = ["instance", "job"]
    list_select_related = ["instance", "job"]
    search_fields = ["instance__name", "job__name"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # a power operation finds the VM's job through it
