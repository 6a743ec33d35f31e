"""GCP's own rules for a job request and an account (a pasted service account key), and its
bundled prices (USD on-demand list prices, Linux, us-central1)."""

import json
import re

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError

from provisioning.clouds.base import AccountCredentials, CloudPrices, IdRule, MachineType
from provisioning.endpoints import token_uri_refusal

REGION = re.compile(r"^[a-z]+-[a-z]+\d+$")
GCE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
GCE_IMAGE = re.compile(
    r"^(?:(?:https://www\.googleapis\.com/compute/v1/)?projects/[a-z][-a-z0-9.:]*[a-z0-9]"
    r"/global/images/(?:family/)?)?[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$"
)
IMAGE: tuple[IdRule, ...] = (
    IdRule(
        "image_id",
        GCE_IMAGE,
        "Give an image name, or projects/PROJECT/global/images/NAME (or .../images/family/"
        "FAMILY), e.g. projects/debian-cloud/global/images/family/debian-12.",
    ),
)
EXISTING_NETWORK: tuple[IdRule, ...] = (
    IdRule(
        "existing_vpc_id",
        GCE_NAME,
        "Give the name of a VPC network such as prod-net.",
        required=True,
    ),
    IdRule(
        "existing_subnet_id",
        GCE_NAME,
        "Give the name of a subnetwork such as prod-subnet.",
        required=True,
    ),
)
GCP_PROJECT = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
KEY_FIELDS = ("type", "client_email", "private_key", "token_uri")

PRICES = CloudPrices(
    machines={
        "e2-micro": MachineType(0.0084, 2, 1),
        "e2-small": MachineType(0.0168, 2, 2),
        "e2-medium": MachineType(0.0335, 2, 4),
        "e2-standard-2": MachineType(0.0670, 2, 8),
        "e2-standard-4": MachineType(0.1340, 4, 16),
        "n2-standard-2": MachineType(0.0971, 2, 8),
        "n2-standard-4": MachineType(0.1942, 4, 16),
        "c3-standard-4": MachineType(0.2014, 4, 16),
    },
    default_machine="e2-small",
    disk_gb_month=0.10,
    lb_hourly=0.025,
    nat_hourly_base=0.0,
    nat_hourly_per_vm=0.0014,
    nat_gb_processed=0.045,
    disk_label="pd-balanced",
    lb_label="forwarding rule of the load balancer",
    nat_label="Cloud NAT (per VM hour + data processing)",
)


def service_account_key_problem(text: str) -> str:
    """What is wrong with a pasted GCP service account key, or ""."""
    try:
        info = json.loads(text)
    except ValueError:
        return "Paste the service account key as downloaded: a JSON document."
    if not isinstance(info, dict) or info.get("type") != "service_account":
        return 'This is not a service account key: its "type" must be "service_account".'
    missing = [name for name in KEY_FIELDS if not info.get(name)]
    if missing:
        return f"The key lacks {', '.join(missing)}: download a new key for the account."
    if "PRIVATE KEY" not in str(info["private_key"]):
        return "The key's private_key is not a PEM private key."
    return ""


def secret_check(secret: str, actor: AbstractBaseUser | None) -> tuple[str, str]:
    """A key typed into the admin: (what is wrong with it, or "", its client email)."""
    if not secret:
        return "", ""
    if problem := service_account_key_problem(secret) or token_uri_refusal(
        str(json.loads(secret)["token_uri"]), actor
    ):
        return problem, ""
    return "", str(json.loads(secret)["client_email"])


def account_credentials(
    credentials: AccountCredentials, actor: AbstractBaseUser | None
) -> AccountCredentials:
    """The pasted key's client email becomes the access key id, the key the secret, and the
    project is the one named or the key's own; a wrong one is its field's error."""
    key = credentials.service_account_key.strip()
    if not key:
        raise ValidationError({"service_account_key": "Paste the service account key (JSON)."})
    if problem := service_account_key_problem(key):
        raise ValidationError({"service_account_key": problem})
    info = json.loads(key)
    if problem := token_uri_refusal(str(info["token_uri"]), actor):
        raise ValidationError({"service_account_key": problem})
    project = credentials.gcp_project.strip() or str(info.get("project_id", ""))
    if not GCP_PROJECT.match(project):
        raise ValidationError(
            {"gcp_project": "Give the GCP project id, such as my-project-123 (6-30 lowercase "
             "letters, digits and hyphens)."}
        )  # fmt: skip
    return AccountCredentials(
        access_key_id=str(info["client_email"]),
        secret_access_key=key,
        role_arn=credentials.role_arn,
        service_account_key=credentials.service_account_key,
        gcp_project=project,
    )
