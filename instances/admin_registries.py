"""Projects' registry logins in the admin: the password is write-only (stored encrypted and
never shown), as cluster tokens are; admins of a project manage its logins."""

from typing import Any

from django import forms
from django.contrib import admin

from instances.admin_scope import ProjectScopedAdmin
from instances.choices import Role
from instances.containerdisks.reference import REGISTRY
from instances.models import RegistryCredential


class RegistryCredentialForm(forms.ModelForm):
    new_password = forms.CharField(
        label="Password or access token",
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Leave empty to keep the stored one (it is encrypted and never shown).",
    )

    class Meta:
        model = RegistryCredential
        fields = ["project", "registry", "username", "new_password"]

    def clean_registry(self) -> str:
        registry = self.cleaned_data.get("registry", "").strip().lower()
        if not REGISTRY.match(registry):
            raise forms.ValidationError(
                "Give the registry's host name and port as references name it, e.g. "
                "registry.example.com:5000."
            )
        return registry

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if not cleaned.get("new_password") and not (self.instance.pk and self.instance.password):
            self.add_error("new_password", "Give the password or access token.")
        return cleaned

    def save(self, commit: bool = True) -> RegistryCredential:
        login = super().save(commit=False)
        if self.cleaned_data.get("new_password"):
            login.password = self.cleaned_data["new_password"]
        if commit:
            login.save()
        return login


@admin.register(RegistryCredential)
class RegistryCredentialAdmin(ProjectScopedAdmin):
    form = RegistryCredentialForm
    change_role = Role.ADMIN
    list_display = ["registry", "username", "project", "created_at"]
    list_filter = ["project"]
    search_fields = ["registry", "username"]
