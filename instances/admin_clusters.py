"""Kubernetes clusters in the admin: a superuser's to add, since every project may place its
instances there. The token is write-only, as cloud secrets are."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from instances.models import Cluster
from instances.services.clusters import cluster_check


class ClusterForm(forms.ModelForm):
    api_url = forms.URLField(
        label="API server",
        assume_scheme="https",
        help_text="The cluster's API server, e.g. https://k8s.example.com:6443.",
    )
    new_token = forms.CharField(
        label="Service account token",
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="The console's service account token on the cluster. Leave empty to keep the "
        "stored one (it is encrypted and never shown).",
    )

    class Meta:
        model = Cluster
        fields = ["name", "api_url", "ca_certificate", "new_token", "namespace_prefix",
                  "kernel_image"]  # fmt: skip

    def clean_ca_certificate(self) -> str:
        text = self.cleaned_data.get("ca_certificate", "").strip()
        if text and "-----BEGIN CERTIFICATE-----" not in text:
            raise forms.ValidationError("Paste the CA certificate in PEM, BEGIN CERTIFICATE.")
        return text

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if not cleaned.get("new_token") and not (self.instance.pk and self.instance.token):
            self.add_error("new_token", "Give the service account token the console signs in with.")
        return cleaned

    def save(self, commit: bool = True) -> Cluster:
        cluster = super().save(commit=False)
        if self.cleaned_data.get("new_token"):
            cluster.token = self.cleaned_data["new_token"]
        if commit:
            cluster.save()
        return cluster


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    form = ClusterForm
    list_display = ["name", "api_url", "zones_read", "checked_at"]
    readonly_fields = ["has_token", "zones", "checked_at", "last_error"]
    actions = ["check_connection"]

    @admin.action(description="Check the connection and read the zones")
    def check_connection(self, request: HttpRequest, clusters: QuerySet[Cluster]) -> None:
        for cluster in clusters:
            if problem := cluster_check(cluster):
                self.message_user(request, f"{cluster}: {problem}", messages.ERROR)
            else:
                zones = ", ".join(cluster.zones) or "no zone labels on its nodes"
                self.message_user(request, f"{cluster} answers; zones: {zones}.")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return bool(request.user.is_superuser)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return bool(request.user.is_superuser)

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return bool(request.user.is_superuser)

    @admin.display(boolean=True, description="Token stored")
    def has_token(self, cluster: Cluster) -> bool:
        return bool(cluster.token_encrypted)

    @admin.display(description="Zones")
    def zones_read(self, cluster: Cluster) -> str:
        return ", ".join(cluster.zones) or "-"
