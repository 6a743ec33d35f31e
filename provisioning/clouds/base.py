"""The one protocol every cloud implements (`Cloud`), and the pipeline calls it answers
(`CloudSteps`). A cloud's package holds all it knows; its SDK is imported inside it only."""

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from django.contrib.auth.models import AbstractBaseUser
from django.template.defaultfilters import pluralize

from provisioning.clouds.context import StepContext
from provisioning.infra import InfraConfig

if TYPE_CHECKING:
    from provisioning.clouds.power import CloudVmBackend
    from provisioning.models import CloudAccount


@dataclass(frozen=True)
class MachineType:
    hourly: float
    vcpus: int
    memory_gb: int


@dataclass(frozen=True)
class CloudPrices:
    """A cloud's bundled USD list prices, and how the review's cost table names each line."""

    machines: dict[str, MachineType]
    default_machine: str
    disk_gb_month: float  # EBS gp3 / pd-balanced
    lb_hourly: float  # ALB / a forwarding rule
    nat_hourly_base: float  # a NAT gateway's own hour (AWS)
    nat_hourly_per_vm: float  # Cloud NAT bills per VM hour (GCP)
    nat_gb_processed: float
    disk_label: str
    lb_label: str
    nat_label: str


@dataclass(frozen=True)
class IdRule:
    """A field that, when given, must match a cloud's id pattern; `message` says what to give."""

    field: str
    pattern: re.Pattern[str]
    message: str
    required: bool = False


def id_errors(config: InfraConfig, rules: "tuple[IdRule, ...]") -> dict[str, str]:
    """Each rule's message at its field where the value breaks the rule."""
    errors = {}
    for rule in rules:
        value = getattr(config, rule.field) or ""
        if (value or rule.required) and not rule.pattern.match(value):
            errors[rule.field] = rule.message
    return errors


@dataclass
class AccountCredentials:
    """What a new cloud account is given; a cloud checks it and fills what it derives."""

    access_key_id: str = ""
    secret_access_key: str = ""
    role_arn: str = ""
    service_account_key: str = ""
    gcp_project: str = ""


class CloudSteps(Protocol):
    """The pipeline's calls into one cloud, for one account and region. Each is idempotent: it
    finds what an earlier attempt made (by tag or name) before creating anything."""

    def check_connection(self) -> str: ...

    def validate(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def create_network(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def create_iam(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def create_launch_template(
        self, config: InfraConfig, ctx: StepContext, user_data: str
    ) -> str: ...

    def create_vms(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def wait_until_ready(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def create_load_balancer(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def create_target_group(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def create_listener(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def create_dns_record(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def update_health_check(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def detach_load_balancer(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def delete_vms(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def delete_launch_template(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def delete_security_group(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def delete_iam(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def delete_network(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def describe_vms(self, config: InfraConfig, ctx: StepContext) -> list[dict[str, str]]: ...


class Cloud(Protocol):
    """Everything the console knows of one cloud: its rules, words and prices here; its SDK
    calls (`steps`, `vm_backend`) imported only when first used."""

    name: str  # the provider's value, and the compute backend name of its VMs
    label: str  # "AWS"
    choice_label: str  # how the wizard offers it
    refusal: str  # why the console does not provision there yet, or ""
    exec_mode: str  # its IAM-gated exec channel: SSM, OSConfig...
    region_pattern: re.Pattern[str]
    region_example: str
    prices: CloudPrices
    image_rules: tuple[IdRule, ...]  # an image asked for by id
    existing_network_rules: tuple[IdRule, ...]  # an existing VPC and subnet

    def plan(self, config: InfraConfig) -> list[str]:
        """Every resource a job will create, in words (the wizard's review)."""
        ...

    def account_credentials(
        self, credentials: AccountCredentials, actor: AbstractBaseUser | None
    ) -> AccountCredentials:
        """The credentials of a new account, checked (ValidationError at the field)."""
        ...

    def secret_check(self, secret: str, actor: AbstractBaseUser | None) -> tuple[str, str]:
        """The admin's new secret: (what is wrong with it or "", the access key id it names)."""
        ...

    def bootstrap_commands(self, sentinel: str) -> list[list[str]]:
        """cloud-init commands this cloud adds after the sentinel is written."""
        ...

    def steps(self, account: "CloudAccount", region: str) -> CloudSteps: ...

    def vm_backend(self) -> "CloudVmBackend":
        """The compute backend that powers its VMs on and off."""
        ...


def instances_in_words(count: int) -> str:
    return f"{count} instance{pluralize(count)}"
