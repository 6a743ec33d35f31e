"""Reading settings from the environment: a string, a flag, a number or a comma-separated list,
each with the default the embedded mode runs on."""

import ipaddress
import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def envint(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def envlist(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if not value:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def run_dir() -> Path:
    """The run folder (ZOPDAY_RUN_DIR, else var/ beside the code), made if missing."""
    path = Path(env("ZOPDAY_RUN_DIR", str(Path(__file__).resolve().parent.parent / "var")))
    path = path.resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def envnetworks(name: str, default: list[str]) -> list[str]:
    """A comma-separated list of networks (CIDRs); a bad one stops the start, named."""
    networks = envlist(name, default)
    for network in networks:
        try:
            ipaddress.ip_network(network)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {network!r} is not a network (give a comma-separated list, e.g. "
                "127.0.0.0/8,169.254.0.0/16)."
            ) from None
    return networks


def envaddresses(name: str, default: list[str], example: str) -> list[str]:
    """A comma-separated list of IP addresses; ImproperlyConfigured names the wrong one."""
    values = envlist(name, default)
    for value in values:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {value!r} is not an IP address (give a comma-separated list, e.g. "
                f"{example})."
            ) from None
    return values
