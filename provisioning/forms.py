"""The wizard's steps, one form each, validated with the rules the API uses."""

from collections.abc import Callable
from typing import Any

from django import forms

from provisioning.choices import BootstrapMode, ExecMode, NetworkMode, PoolMode, Provider
from provisioning.infra import InfraConfig
from provisioning.prices import INSTANCE_HOURLY
from provisioning.validation import (
    health_check_path_error,
    load_balancer_errors,
    machine_errors,
    name_errors,
    network_errors,
    pool_errors,
    provider_errors,
)

PROVIDER_LABELS = [
    (Provider.AWS.value, "AWS"),
    (Provider.GCP.value, "GCP (coming next)"),
    (Provider.AZURE.value, "Azure (VMSS in preview)"),
]


class WizardStep(forms.Form):
    """A wizard step: its fields, plus the rule that checks them against the whole draft."""

    title = ""
    rule: Callable[[InfraConfig], dict[str, str]] = staticmethod(lambda config: {})  # type: ignore[assignment]

    def __init__(self, *args: Any, draft: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.draft = draft or {}
        super().__init__(*args, **kwargs)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        values = {**self.draft, **cleaned}
        known = InfraConfig.__dataclass_fields__
        config = InfraConfig(**{k: v for k, v in values.items() if k in known})
        for field, message in self.rule(config).items():
            if field in self.fields and field not in self.errors:
                self.add_error(field, message)
            elif field not in self.fields:
                self.add_error(None, message)
        return cleaned


class ProviderStep(WizardStep):
    title = "Provider"
    name = forms.CharField(label="Environment name", max_length=30, help_text="Names the VMs.")
    provider = forms.ChoiceField(choices=PROVIDER_LABELS, widget=forms.RadioSelect, initial="aws")
    account = forms.TypedChoiceField(label="Cloud account", coerce=int, choices=[])

    def __init__(
        self, *args: Any, accounts: list[tuple[int, str]] | None = None, **kw: Any
    ) -> None:
        super().__init__(*args, **kw)
        self.fields["account"].choices = accounts or []  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        for field, message in {
            **name_errors(cleaned.get("name", "")),
            **provider_errors(cleaned.get("provider", "")),
        }.items():
            if field not in self.errors:
                self.add_error(field, message)
        return cleaned


class PoolStep(WizardStep):
    title = "Region and pool"
    rule = staticmethod(pool_errors)
    region = forms.CharField(initial="us-east-1", max_length=32)
    pool_mode = forms.ChoiceField(
        choices=PoolMode.choices, widget=forms.RadioSelect, initial="Fixed"
    )
    instance_count = forms.IntegerField(label="Instances (Fixed)", initial=1, min_value=0)
    asg_min = forms.IntegerField(label="ASG min", initial=1, min_value=0)
    asg_max = forms.IntegerField(label="ASG max", initial=1, min_value=0)
    asg_desired = forms.IntegerField(label="ASG desired", initial=1, min_value=0)


class MachineStep(WizardStep):
    title = "Machines"
    rule = staticmethod(machine_errors)
    instance_type = forms.ChoiceField(
        choices=[(t, f"{t} (${p}/h)") for t, p in INSTANCE_HOURLY.items()], initial="t3.micro"
    )
    disk_gb = forms.IntegerField(label="Root disk (GB)", initial=20)
    bootstrap_mode = forms.ChoiceField(
        choices=BootstrapMode.choices, widget=forms.RadioSelect, initial=BootstrapMode.DEFAULT
    )
    exec_mode = forms.ChoiceField(
        label="Exec channel", choices=ExecMode.choices, initial=ExecMode.SSM,
        help_text="No public SSH: interactive access only through the cloud's IAM-gated exec.",
    )  # fmt: skip


class NetworkStep(WizardStep):
    title = "Network"
    rule = staticmethod(network_errors)
    network_mode = forms.ChoiceField(
        choices=NetworkMode.choices, widget=forms.RadioSelect, initial=NetworkMode.NEW
    )
    vpc_cidr = forms.CharField(label="New VPC CIDR", initial="10.42.0.0/16", required=False)
    existing_vpc_id = forms.CharField(label="Existing VPC id", required=False)
    existing_subnet_id = forms.CharField(label="Existing subnet id", required=False)


class LoadBalancerStep(WizardStep):
    title = "Load balancer"
    rule = staticmethod(load_balancer_errors)
    load_balancer = forms.BooleanField(label="With a load balancer", required=False)
    health_check_path = forms.CharField(initial="/healthz", required=False)
    health_check_port = forms.IntegerField(initial=80)
    dns_name = forms.CharField(label="DNS name", required=False, help_text="e.g. app.example.com")


STEPS: dict[str, type[WizardStep]] = {
    "provider": ProviderStep,
    "pool": PoolStep,
    "machine": MachineStep,
    "network": NetworkStep,
    "load-balancer": LoadBalancerStep,
}
STEP_NAMES = [*STEPS, "review"]


class HealthCheckForm(forms.Form):
    """A landed job's load balancer health check, changed in place (stepUpdateHealthCheck)."""

    health_check_path = forms.CharField(label="Path", max_length=1024)
    health_check_port = forms.IntegerField(label="Port", min_value=1, max_value=65535)

    def clean_health_check_path(self) -> str:
        path = self.cleaned_data["health_check_path"]
        if message := health_check_path_error(path):
            raise forms.ValidationError(message)
        return path


class CloudAccountForm(forms.Form):
    name = forms.CharField(max_length=100)
    default_region = forms.CharField(max_length=32, initial="us-east-1")
    access_key_id = forms.CharField(max_length=128, required=False)
    secret_access_key = forms.CharField(
        required=False, widget=forms.PasswordInput(render_value=False),
        help_text="Stored encrypted; never shown again.",
    )  # fmt: skip
    role_arn = forms.CharField(label="Role ARN", required=False)
    endpoint_url = forms.URLField(label="Endpoint URL", required=False, assume_scheme="https")
