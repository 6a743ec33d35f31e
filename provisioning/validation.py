"""What a job request must satisfy, field by field; the wizard and the API share it."""

import ipaddress
import json
import re

from django.core.exceptions import ValidationError

from provisioning.choices import (
    EXEC_MODE_FOR_PROVIDER,
    BootstrapMode,
    ExecMode,
    NetworkMode,
    PoolMode,
    Provider,
)
from provisioning.infra import InfraConfig
from provisioning.prices import prices_for
from provisioning.providers.azure import AZURE_INVALID
from provisioning.schedules import schedule_errors

NAME = re.compile(r"^[a-z]([a-z0-9-]{0,28}[a-z0-9])?$")
REGIONS: dict[str, tuple[re.Pattern[str], str]] = {
    Provider.AWS: (re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$"), "us-east-1"),
    Provider.GCP: (re.compile(r"^[a-z]+-[a-z]+\d+$"), "us-central1"),
}
GCE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
DNS_NAME = re.compile(rf"^{LABEL}(\.{LABEL})+\.?$")
GCP_PROJECT = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
KEY_FIELDS = ("type", "client_email", "private_key", "token_uri")
MAX_FIXED = 20
MAX_ASG = 50


def provider_errors(provider: str) -> dict[str, str]:
    if provider == Provider.AZURE:
        return {"provider": AZURE_INVALID}
    if provider not in (Provider.AWS, Provider.GCP):
        return {"provider": "Choose aws or gcp."}
    return {}


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


def region_error(provider: str, region: str) -> str:
    pattern, example = REGIONS.get(provider, REGIONS[Provider.AWS])
    return "" if pattern.match(region or "") else f"Give a region such as {example}."


def name_errors(name: str) -> dict[str, str]:
    if not NAME.match(name or ""):
        return {
            "name": "Use 1-30 lowercase letters, digits and hyphens, starting with a letter "
            "(it names the VMs: <name>-1, <name>-2, ...)."
        }
    return {}


def pool_errors(config: InfraConfig) -> dict[str, str]:
    """At most one message a field, at the field that is wrong: a min above the max is the
    max's, a desired size outside them the desired size's."""
    errors = {}
    if message := region_error(config.provider, config.region):
        errors["region"] = message
    if config.pool_mode == PoolMode.FIXED:
        if not 1 <= config.instance_count <= MAX_FIXED:
            errors["instance_count"] = f"A fixed pool has 1 to {MAX_FIXED} instances."
    elif config.pool_mode == PoolMode.ASG:
        errors.update(_asg_errors(config.asg_min, config.asg_max, config.asg_desired))
    else:
        errors["pool_mode"] = "Choose Fixed or ASG."
    return errors


def _asg_errors(low: int, high: int, desired: int) -> dict[str, str]:
    errors = {}
    if not 0 <= low <= MAX_ASG:
        errors["asg_min"] = f"The group's min is 0 to {MAX_ASG}."
    if not 1 <= high <= MAX_ASG:
        errors["asg_max"] = f"The group's max is 1 to {MAX_ASG}."
    elif "asg_min" not in errors and low > high:
        errors["asg_max"] = f"The group's max must be at least its min ({low})."
    if errors:
        return errors
    if desired < 1:
        errors["asg_desired"] = "Start at least one instance."
    elif not low <= desired <= high:
        errors["asg_desired"] = f"Keep min ≤ desired ≤ max: {low} to {high} here."
    return errors


def machine_errors(config: InfraConfig) -> dict[str, str]:
    errors = {}
    machines = prices_for(config.provider).machines
    if config.instance_type not in machines:
        errors["instance_type"] = f"Choose one of: {', '.join(machines)}."
    if not 8 <= config.disk_gb <= 2048:
        errors["disk_gb"] = "The root disk is 8 to 2048 GB."
    if config.bootstrap_mode not in BootstrapMode.values:
        errors["bootstrap_mode"] = "Choose default or bare-metal."
    expected = EXEC_MODE_FOR_PROVIDER.get(config.provider, ExecMode.SSM)
    if config.exec_mode != expected:
        errors["exec_mode"] = f"On {config.provider.upper()} the exec channel is {expected}."
    return errors


AMI_ID = re.compile(r"^ami-(?:[0-9a-f]{8}|[0-9a-f]{17})$")
GCE_IMAGE = re.compile(
    r"^(?:(?:https://www\.googleapis\.com/compute/v1/)?projects/[a-z][-a-z0-9.:]*[a-z0-9]"
    r"/global/images/(?:family/)?)?[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$"
)


def image_errors(config: InfraConfig) -> dict[str, str]:
    """An image asked for by id (the default otherwise) has that cloud's form; stepValidate
    checks that it exists."""
    if not config.image_id:
        return {}
    if config.provider == Provider.GCP and not GCE_IMAGE.match(config.image_id):
        return {
            "image_id": "Give an image name, or projects/PROJECT/global/images/NAME (or "
            ".../images/family/FAMILY), e.g. projects/debian-cloud/global/images/family/debian-12."
        }
    if config.provider == Provider.AWS and not AMI_ID.match(config.image_id):
        return {"image_id": "Give an AMI id such as ami-0123456789abcdef0."}
    return {}


def network_errors(config: InfraConfig) -> dict[str, str]:
    errors = {}
    if config.network_mode == NetworkMode.NEW:
        try:
            network = ipaddress.ip_network(config.vpc_cidr)
        except ValueError:
            errors["vpc_cidr"] = "Give an IPv4 network such as 10.42.0.0/16."
        else:
            if network.version != 4 or not 16 <= network.prefixlen <= 22:
                errors["vpc_cidr"] = "Give an IPv4 network from /16 to /22."
    elif config.network_mode == NetworkMode.EXISTING and config.provider == Provider.GCP:
        if not GCE_NAME.match(config.existing_vpc_id or ""):
            errors["existing_vpc_id"] = "Give the name of a VPC network such as prod-net."
        if not GCE_NAME.match(config.existing_subnet_id or ""):
            errors["existing_subnet_id"] = "Give the name of a subnetwork such as prod-subnet."
    elif config.network_mode == NetworkMode.EXISTING:
        if not re.match(r"^vpc-[0-9a-f]{8,17}$", config.existing_vpc_id or ""):
            errors["existing_vpc_id"] = "Give a VPC id such as vpc-0a1b2c3d."
        if not re.match(r"^subnet-[0-9a-f]{8,17}$", config.existing_subnet_id or ""):
            errors["existing_subnet_id"] = "Give a subnet id such as subnet-0a1b2c3d."
    else:
        errors["network_mode"] = "Choose new or existing."
    return errors


# A URL path of unreserved characters, %XX escapes and the sub-delimiters nginx reads as
# nothing special: no quotes, braces, semicolons, spaces, `#`, `?`, `$` or backslashes.
HEALTH_CHECK_PATH = re.compile(r"^/(?:[A-Za-z0-9\-._~!*+,=:@/]|%[0-9A-Fa-f]{2})*$")
HEALTH_CHECK_PATH_MAX = 1024


def health_check_path_error(path: str) -> str:
    """The same rule on every cloud: the path is also written into the VMs' NGINX config."""
    if len(path) > HEALTH_CHECK_PATH_MAX or not HEALTH_CHECK_PATH.match(path):
        return (
            "The health check path is a URL path: it starts with / and has letters, digits, "
            "- . _ ~ ! * + , = : @ / and %XX escapes only (e.g. /healthz)."
        )
    return ""


def health_check_errors(path: str, port: int) -> dict[str, str]:
    """The load balancer's health check, in the wizard and when it is changed later."""
    errors: dict[str, str] = {}
    if message := health_check_path_error(path):
        errors["health_check_path"] = message
    if not 1 <= port <= 65535:
        errors["health_check_port"] = "A port is 1 to 65535."
    return errors


def load_balancer_errors(config: InfraConfig) -> dict[str, str]:
    errors: dict[str, str] = {}
    if not config.load_balancer:
        nginx = config.bootstrap_mode != BootstrapMode.BARE_METAL  # it answers on the path too
        if nginx and (message := health_check_path_error(config.health_check_path)):
            errors["health_check_path"] = message
        if config.dns_name:
            errors["dns_name"] = "A DNS name needs the load balancer."
        return errors
    errors.update(health_check_errors(config.health_check_path, config.health_check_port))
    if config.dns_name and not DNS_NAME.match(config.dns_name.lower()):
        errors["dns_name"] = "Give a host name such as app.example.com."
    return errors


def stop_schedule_errors(config: InfraConfig) -> dict[str, str]:
    config.schedule_tz = config.schedule_tz.strip() or "UTC"
    errors = schedule_errors(config.schedule, config.schedule_tz)
    if not config.schedule:
        return errors
    if config.pool_mode != PoolMode.FIXED:
        errors.setdefault(
            "schedule", "A stop schedule is for a Fixed pool: an ASG pool sets its own size."
        )
    return errors


def config_errors(config: InfraConfig) -> dict[str, str]:
    return {
        **provider_errors(config.provider),
        **pool_errors(config),
        **machine_errors(config),
        **image_errors(config),
        **network_errors(config),
        **load_balancer_errors(config),
        **stop_schedule_errors(config),
    }


def validate_request(name: str, config: InfraConfig) -> None:
    errors = {**name_errors(name), **config_errors(config)}
    if errors:
        raise ValidationError(errors)
