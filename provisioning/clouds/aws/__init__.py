"""AWS: EC2 VMs in a VPC with NAT egress, exec through SSM. boto3 is imported by `steps` and
`vm_backend` only, when first used."""

from typing import TYPE_CHECKING

from provisioning.clouds.aws import plan, rules
from provisioning.clouds.base import CloudSteps

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
    image_rules = rules.IMAGE
    existing_network_rules = rules.EXISTING_NETWORK
    plan = staticmethod(plan.plan)
    account_credentials = staticmethod(rules.account_credentials)
    secret_check = staticmethod(rules.secret_check)

    def bootstrap_commands(self, sentinel: str) -> list[list[str]]:
        return []

    def steps(self, account: "CloudAccount", region: str) -> CloudSteps:
        from provisioning.clouds.aws.steps import AwsSteps

        return AwsSteps(account, region)

    def vm_backend(self) -> "CloudVmBackend":
        from provisioning.clouds.aws.power import AwsVmBackend

        return AwsVmBackend()


AWS = AwsCloud()
