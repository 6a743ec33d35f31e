"""AWS: EC2 VMs in a VPC with NAT egress, exec through SSM. boto3 is imported by `steps` and
`vm_backend` only, when first used."""

from typing import TYPE_CHECKING

from django.contrib.auth.models import AbstractBaseUser

from provisioning.clouds.aws import plan, rules
from provisioning.clouds.base import AccountCredentials, CloudSteps
from provisioning.infra import InfraConfig

if TYPE_CHECKING:
    from provisioning.clouds.power import CloudVmBackend
    from provisioning.models import CloudAccount


class AwsCloud:
    name = "aws"
    label = "AWS"
    choice_label = "AWS"
    refusal = ""
    exec_mode = "SSM"
    region_pattern = rules.REGION
    region_example = "us-east-1"
    prices = rules.PRICES

    def plan(self, config: InfraConfig) -> list[str]:
        return plan.plan(config)

    def image_errors(self, config: InfraConfig) -> dict[str, str]:
        return rules.image_errors(config)

    def existing_network_errors(self, config: InfraConfig) -> dict[str, str]:
        return rules.existing_network_errors(config)

    def account_credentials(
        self, credentials: AccountCredentials, actor: AbstractBaseUser | None
    ) -> AccountCredentials:
        return rules.account_credentials(credentials)

    def secret_check(self, secret: str, actor: AbstractBaseUser | None) -> tuple[str, str]:
        return "", ""  # a secret access key: nothing to read in it

    def bootstrap_commands(self, sentinel: str) -> list[list[str]]:
        return []

    def steps(self, account: "CloudAccount", region: str) -> CloudSteps:
        from provisioning.clouds.aws.steps import AwsSteps

        return AwsSteps(account, region)

    def vm_backend(self) -> "CloudVmBackend":
        from provisioning.clouds.aws.power import AwsVmBackend

        return AwsVmBackend()


AWS = AwsCloud()
