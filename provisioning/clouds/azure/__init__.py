"""Azure: a clean stub until Azure VMSS provisioning is generally available."""

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError

from provisioning.clouds.base import AccountCredentials, CloudPrices, CloudSteps, IdRule
from provisioning.clouds.errors import CloudError
from provisioning.infra import InfraConfig

if TYPE_CHECKING:
    from provisioning.clouds.power import CloudVmBackend
    from provisioning.models import CloudAccount

AZURE_INVALID = (
    "Invalid: Azure VMSS provisioning is in preview, not yet GA. The Azure exec channel "
    "(AzureRunCmd) is gated on GA too; both arrive in the console when Azure VMSS reaches GA."
)


class UnavailableSteps:
    """Every pipeline call answers with the same clean Invalid."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __getattr__(self, attribute: str) -> Callable[..., str]:
        def refuse(*args: object, **kwargs: object) -> str:
            raise CloudError(self.reason, retryable=False, code="Invalid")

        return refuse


class AzureCloud:
    name = "azure"
    label = "Azure"
    choice_label = "Azure (VMSS in preview)"
    refusal = AZURE_INVALID
    exec_mode = "AzureRunCmd"
    region_pattern = re.compile(r"^[a-z][a-z0-9-]*$")
    region_example = "eastus"
    prices = CloudPrices(
        machines={}, default_machine="", disk_gb_month=0.0, lb_hourly=0.0, nat_hourly_base=0.0,
        nat_hourly_per_vm=0.0, nat_gb_processed=0.0, disk_label="", lb_label="", nat_label="",
    )  # fmt: skip
    image_rules: tuple[IdRule, ...] = ()
    existing_network_rules: tuple[IdRule, ...] = ()

    def plan(self, config: InfraConfig) -> list[str]:
        return []

    def account_credentials(
        self, credentials: AccountCredentials, actor: AbstractBaseUser | None
    ) -> AccountCredentials:
        raise ValidationError({"provider": self.refusal})

    def secret_check(self, secret: str, actor: AbstractBaseUser | None) -> tuple[str, str]:
        return "", ""

    def bootstrap_commands(self, sentinel: str) -> list[list[str]]:
        return []

    def steps(self, account: "CloudAccount", region: str) -> CloudSteps:
        return UnavailableSteps(self.refusal)  # type: ignore[return-value]

    def vm_backend(self) -> "CloudVmBackend":
        raise CloudError(self.refusal)


AZURE = AzureCloud()
