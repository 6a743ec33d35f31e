"""Validation rules with messages that say what to fix. Models, forms and the API share them."""

import hashlib
import ipaddress
import re
from base64 import b64decode, b64encode

import yaml
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.serialization import load_ssh_public_key
from django.core.exceptions import ValidationError

MAC_COLON = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
MAC_HYPHEN = re.compile(r"^[0-9a-fA-F]{2}(-[0-9a-fA-F]{2}){5}$")
DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def validate_mac(value: str) -> None:
    """Colon notation only, unicast. Hyphens are refused with the colon form to use instead."""
    if MAC_HYPHEN.match(value):
        raise ValidationError(
            "Use colon notation for MAC addresses: %(fixed)s, not %(value)s.",
            code="mac_hyphen",
            params={"fixed": value.replace("-", ":").lower(), "value": value},
        )
    if not MAC_COLON.match(value):
        raise ValidationError(
            "Enter a MAC address as six pairs of hex digits separated by colons, "
            "e.g. 52:54:00:12:34:56.",
            code="mac_format",
        )
    if int(value[:2], 16) & 1:
        raise ValidationError(
            "%(value)s is a multicast address; the first byte must be even (e.g. 52:54:00:...).",
            code="mac_multicast",
            params={"value": value},
        )


def validate_dns_label(value: str) -> None:
    if not DNS_LABEL.match(value):
        raise ValidationError(
            "Use 1-63 lowercase letters, digits and hyphens, starting and ending with a letter "
            "or digit (it becomes the guest's hostname).",
            code="dns_label",
        )


def parse_network(value: str, version: int) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """A CIDR of the given IP version; host bits set is an error that shows the network meant."""
    label = f"IPv{version}"
    try:
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValidationError(
            f"Enter an {label} network in CIDR notation, e.g. "
            + ("10.0.0.0/24." if version == 4 else "fd00:10::/64."),
            code="cidr",
        ) from None
    if network.version != version:
        raise ValidationError(f"{value} is not an {label} network.", code="cidr_version")
    if str(network) != value and ipaddress.ip_interface(value).network == network:
        raise ValidationError(
            "%(value)s has host bits set; did you mean %(network)s?",
            code="cidr_host_bits",
            params={"value": value, "network": str(network)},
        )
    return network


def parse_ssh_public_key(value: str) -> tuple[str, str]:
    """The key normalised to `type base64 [comment]` and its SHA256 fingerprint."""
    text = " ".join(value.split())
    if not text:
        raise ValidationError("Paste an OpenSSH public key.", code="ssh_key_empty")
    if "PRIVATE KEY" in text:
        raise ValidationError(
            "This is a private key. Paste the public key (the .pub file) instead; "
            "never share the private one.",
            code="ssh_private_key",
        )
    parts = text.split(" ", 2)
    try:
        key = load_ssh_public_key(" ".join(parts[:2]).encode())
    except (ValueError, TypeError, IndexError, UnsupportedAlgorithm):
        raise ValidationError(
            "This is not a valid OpenSSH public key. It should look like "
            "'ssh-ed25519 AAAAC3Nza... user@host'.",
            code="ssh_key_invalid",
        ) from None
    del key  # parsed only to prove it is a key
    blob = b64decode(parts[1])
    digest = b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return text, f"SHA256:{digest}"


def parse_cloud_config(value: str) -> dict:
    """Custom user data must be `#cloud-config` followed by a YAML mapping."""
    if not value.lstrip().startswith("#cloud-config"):
        raise ValidationError(
            "Custom user data must start with the line #cloud-config.",
            code="cloud_config_header",
        )
    try:
        data = yaml.safe_load(value)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise ValidationError(
            "The cloud-config is not valid YAML%(where)s: %(problem)s.",
            code="cloud_config_yaml",
            params={"where": where, "problem": problem},
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValidationError(
            "The cloud-config must be a YAML mapping of keys such as packages, runcmd, users.",
            code="cloud_config_mapping",
        )
    return data
