"""AWS's own rules for a job request and an account, and its bundled prices (USD on-demand
list prices, Linux, us-east-1)."""

import re

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError

from provisioning.clouds.base import AccountCredentials, CloudPrices, IdRule, MachineType

REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
IMAGE: tuple[IdRule, ...] = (
    IdRule(
        "image_id",
        re.compile(r"^ami-(?:[0-9a-f]{8}|[0-9a-f]{17})$"),
        "Give an AMI id such as ami-0123456789abcdef0.",
    ),
)
EXISTING_NETWORK: tuple[IdRule, ...] = (
    IdRule(
        "existing_vpc_id",
        re.compile(r"^vpc-[0-9a-f]{8,17}$"),
        "Give a VPC id such as vpc-0a1b2c3d.",
        required=True,
    ),
    IdRule(
        "existing_subnet_id",
        re.compile(r"^subnet-[0-9a-f]{8,17}$"),
        "Give a subnet id such as subnet-0a1b2c3d.",
        required=True,
    ),
)

PRICES = CloudPrices(
    machines={
        "t3.micro": MachineType(0.0104, 2, 1),
        "t3.small": MachineType(0.0208, 2, 2),
        "t3.medium": MachineType(0.0416, 2, 4),
        "t3.large": MachineType(0.0832, 2, 8),
        "m6i.large": MachineType(0.096, 2, 8),
        "m6i.xlarge": MachineType(0.192, 4, 16),
        "c6i.large": MachineType(0.085, 2, 4),
        "r6i.large": MachineType(0.126, 2, 16),
    },
    default_machine="t3.micro",
    disk_gb_month=0.08,
    lb_hourly=0.0225,
    nat_hourly_base=0.045,
    nat_hourly_per_vm=0.0,
    nat_gb_processed=0.045,
    disk_label="EBS gp3",
    lb_label="Application Load Balancer",
    nat_label="NAT gateway (hours + data processing)",
)


def account_credentials(
    credentials: AccountCredentials, actor: AbstractBaseUser | None
) -> AccountCredentials:
    """Access keys, or a role (or both: the keys assume the role)."""
    if not credentials.role_arn and not (
        credentials.access_key_id and credentials.secret_access_key
    ):
        raise ValidationError({"access_key_id": "Give an access key and its secret, or a role."})
    return credentials


def secret_check(secret: str, actor: AbstractBaseUser | None) -> tuple[str, str]:
    """A secret access key: nothing in it to read."""
    return "", ""
