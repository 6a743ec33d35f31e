"""What a job request must satisfy, field by field; the wizard and the API share it."""

import ipaddress
import re

from django.core.exceptions import ValidationError

from provisioning.choices import BootstrapMode, NetworkMode, PoolMode
from provisioning.clouds import CLOUDS, available, cloud_for
from provisioning.clouds.base import id_errors
from provisioning.infra import InfraConfig
from provisioning.schedules import schedule_errors

NAME = re.compile(r"^[a-z]([a-z0-9-]{0,28}[a-z0-9])?$")
LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
DNS_NAME = re.compile(rf"^{LABEL}(\.{LABEL})+\.?$")
MAX_FIXED = 20
MAX_ASG = 50


def provider_errors(provider: str) -> dict[str, str]:
    if provider in CLOUDS and (refusal := CLOUDS[provider].refusal):
        return {"provider": refusal}
    if provider not in CLOUDS:
        return {"provider": f"Choose {' or '.join(cloud.name for cloud in available())}."}
    return {}


def region_error(provider: str, region: str) -> str:
    cloud = cloud_for(provider)
    if cloud.region_pattern.match(region or ""):
        return ""
    return f"Give a region such as {cloud.region_example}."


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
    cloud = cloud_for(config.provider)
    machines = cloud.prices.machines
    if machines and config.instance_type not in machines:
        errors["instance_type"] = f"Choose one of: {', '.join(machines)}."
    if not 8 <= config.disk_gb <= 2048:
        errors["disk_gb"] = "The root disk is 8 to 2048 GB."
    if config.bootstrap_mode not in BootstrapMode.values:
        errors["bootstrap_mode"] = "Choose default or bare-metal."
    expected = cloud.exec_mode
    gated = [other.refusal for other in CLOUDS.values() if other.exec_mode == config.exec_mode]
    if gated and gated[0]:  # a cloud not yet provisioned on: its channel is gated with it
        errors["exec_mode"] = gated[0]
    elif config.exec_mode != expected:
        errors["exec_mode"] = f"On {config.provider.upper()} the exec channel is {expected}."
    return errors


def image_errors(config: InfraConfig) -> dict[str, str]:
    """An image asked for by id (the default otherwise) has that cloud's form; stepValidate
    checks that it exists."""
    return id_errors(config, cloud_for(config.provider).image_rules)


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
    elif config.network_mode == NetworkMode.EXISTING:
        errors.update(id_errors(config, cloud_for(config.provider).existing_network_rules))
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
