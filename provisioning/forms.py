"""The wizard's steps, one form each, validated with the rules the API uses."""

from collections.abc import Callable
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser

from instances.models import Project
from provisioning.choices import BootstrapMode, NetworkMode, PoolMode
from provisioning.clouds import CLOUDS, DEFAULT, available, cloud_for, exec_mode_choices
from provisioning.endpoints import endpoint_refusal, may_set_any_endpoint
from provisioning.infra import InfraConfig
from provisioning.schedules import SCHEDULES
from provisioning.space import name_clash
from provisioning.validation import (
    health_check_path_error,
    load_balancer_errors,
    machine_errors,
    name_errors,
    network_errors,
    pool_errors,
    provider_errors,
)

PROVIDER_LABELS = [(cloud.name, cloud.choice_label) for cloud in CLOUDS.values()]


class WizardStep(forms.Form):
    """A wizard step: its fields, plus the rule that checks them against the whole draft."""

    title = ""
    rule: Callable[[InfraConfig], dict[str, str]] = staticmethod(lambda config: {})  # type: ignore[assignment]
    # field → (the field choosing a mode, the value choosing the mode the field belongs to)
    mode_fields: dict[str, tuple[str, Any]] = {}

    def __init__(self, *args: Any, draft: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.draft = draft or {}
        super().__init__(*args, **kwargs)
        self.cloud = cloud_for(str(self.draft.get("provider") or DEFAULT.name))
        if self.is_bound:  # a field of the mode not chosen may be left empty
            for field, (mode, value) in self.mode_fields.items():
                if self[mode].data != value:
                    self.fields[field].required = False

    def _default(self, field: str, value: Any, fits: Callable[[Any], bool]) -> None:
        """The provider's default for a field, unless the draft holds a value that fits it
        (a value chosen for another provider does not)."""
        self.fields[field].initial = value
        if not fits(self.initial.get(field)):
            self.initial.pop(field, None)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        for field in self.mode_fields:
            if field in cleaned and cleaned[field] is None:  # left empty: its mode is not used
                cleaned[field] = self.fields[field].initial
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
    provider = forms.ChoiceField(
        choices=PROVIDER_LABELS, widget=forms.RadioSelect, initial=DEFAULT.name
    )
    account = forms.TypedChoiceField(label="Cloud account", coerce=int, choices=[])

    def __init__(
        self,
        *args: Any,
        accounts: list[tuple[int, str, str]] | None = None,
        project: Project | None = None,
        **kw: Any,
    ) -> None:
        """`accounts`: (id, label, provider) of each of the project's cloud accounts; `project`:
        where the name must be free."""
        super().__init__(*args, **kw)
        self.project = project
        self.account_providers = {pk: provider for pk, _, provider in accounts or []}
        self.fields["account"].choices = [  # type: ignore[attr-defined]
            (pk, label) for pk, label, _ in accounts or []
        ]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        provider = cleaned.get("provider", "")
        errors = {**name_errors(cleaned.get("name", "")), **provider_errors(provider)}
        if "name" not in errors and self.project is not None:
            config = InfraConfig(provider=provider)
            if clash := name_clash(project=self.project, name=cleaned["name"], config=config):
                errors["name"] = clash
        account_provider = self.account_providers.get(cleaned.get("account", 0), provider)
        if "provider" not in errors and account_provider != provider:
            errors["account"] = (
                f"This account is on {account_provider.upper()}: choose a {provider.upper()} "
                "account, or add one under Cloud accounts."
            )
        for field, message in errors.items():
            if field not in self.errors:
                self.add_error(field, message)
        return cleaned


class PoolStep(WizardStep):
    title = "Region and pool"
    rule = staticmethod(pool_errors)  # the sizes' bounds too: one message a field
    region = forms.CharField(initial="us-east-1", max_length=32)
    pool_mode = forms.ChoiceField(
        choices=PoolMode.choices, widget=forms.RadioSelect, initial="Fixed"
    )
    instance_count = forms.IntegerField(label="Instances (Fixed)", initial=1)
    asg_min = forms.IntegerField(label="ASG min", initial=1)
    asg_max = forms.IntegerField(label="ASG max", initial=1)
    asg_desired = forms.IntegerField(label="ASG desired", initial=1)
    mode_fields = {
        "instance_count": ("pool_mode", PoolMode.FIXED),
        **{name: ("pool_mode", PoolMode.ASG) for name in ("asg_min", "asg_max", "asg_desired")},
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        pattern = self.cloud.region_pattern
        self._default(
            "region", self.cloud.region_example, lambda value: bool(pattern.match(str(value or "")))
        )


class MachineStep(WizardStep):
    title = "Machines"
    rule = staticmethod(machine_errors)
    instance_type = forms.ChoiceField(choices=[])
    disk_gb = forms.IntegerField(label="Root disk (GB)", initial=20)
    bootstrap_mode = forms.ChoiceField(
        choices=BootstrapMode.choices, widget=forms.RadioSelect, initial=BootstrapMode.DEFAULT
    )
    exec_mode = forms.ChoiceField(
        label="Exec channel", choices=exec_mode_choices, initial=DEFAULT.exec_mode,
        help_text="No public SSH: interactive access only through the cloud's IAM-gated exec.",
    )  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        prices = self.cloud.prices
        self.fields["instance_type"].choices = [  # type: ignore[attr-defined]
            (name, f"{name} (${machine.hourly}/h)") for name, machine in prices.machines.items()
        ]
        self._default(
            "instance_type", prices.default_machine, lambda value: value in prices.machines
        )
        exec_mode = self.cloud.exec_mode
        self._default("exec_mode", exec_mode, lambda value: value == exec_mode)


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
    mode_fields = {"health_check_port": ("load_balancer", True)}


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


class SecretTextarea(forms.Textarea):
    """A textarea that never renders what was typed (a pasted key stays out of the page)."""

    def format_value(self, value: Any) -> None:
        return None


class CloudAccountForm(forms.Form):
    name = forms.CharField(max_length=100)
    provider = forms.ChoiceField(
        choices=[(cloud.name, cloud.label) for cloud in available()],
        widget=forms.RadioSelect, initial=DEFAULT.name,
    )  # fmt: skip
    default_region = forms.CharField(
        max_length=32, initial="us-east-1", help_text="e.g. us-east-1 (AWS), us-central1 (GCP)."
    )
    access_key_id = forms.CharField(label="Access key id (AWS)", max_length=128, required=False)
    secret_access_key = forms.CharField(
        label="Secret access key (AWS)", required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Stored encrypted; never shown again.",
    )  # fmt: skip
    role_arn = forms.CharField(label="Role ARN (AWS)", required=False)
    service_account_key = forms.CharField(
        label="Service account key (GCP)", required=False,
        widget=SecretTextarea(attrs={"rows": 4, "autocomplete": "off", "spellcheck": "false"}),
        help_text="The JSON key file's contents. Stored encrypted; never shown again.",
    )  # fmt: skip
    gcp_project = forms.CharField(
        label="GCP project", max_length=30, required=False,
        help_text="Leave empty for the key's own project.",
    )  # fmt: skip
    endpoint_url = forms.URLField(
        label="Endpoint URL", required=False, assume_scheme="https",
        help_text="Leave empty for the cloud's public endpoints.",
    )  # fmt: skip

    def __init__(self, *args: Any, user: AbstractBaseUser | None = None, **kwargs: Any) -> None:
        """The endpoint URL is offered to superusers, and to others where the environment allows
        hosts; posted by anyone else, it is refused at its field."""
        super().__init__(*args, **kwargs)
        self.user = user
        allowed = settings.ZOPDAY_CLOUD_ENDPOINT_ALLOWLIST
        if not may_set_any_endpoint(user):
            if allowed:
                self.fields["endpoint_url"].help_text = f"Allowed hosts: {', '.join(allowed)}."
            elif not self.data.get("endpoint_url"):
                del self.fields["endpoint_url"]

    def clean_endpoint_url(self) -> str:
        url = self.cleaned_data["endpoint_url"]
        if message := endpoint_refusal(url, self.user):
            raise forms.ValidationError(message)
        return url


class ScheduleForm(forms.Form):
    """A Fixed pool's ZopNight stop schedule (provisioning.schedules)."""

    schedule = forms.ChoiceField(label="Stop schedule", choices=list(SCHEDULES.items()),
                                 required=False)  # fmt: skip
    schedule_tz = forms.CharField(
        label="Time zone", max_length=64, initial="UTC", required=False,
        help_text="Empty: UTC.",
    )  # fmt: skip
