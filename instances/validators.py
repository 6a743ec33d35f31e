"""Validation rules with messages that say what to fix. Models, forms and the API share them."""

import hashlib
import ipaddress
import re
import unicodedata
from base64 import b64decode, b64encode

import yaml
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.serialization import load_ssh_public_key
from django.core.exceptions import ValidationError

from instances.bounded_yaml import YamlRefused, yaml_load, yaml_problem

MAC_COLON = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
MAC_HYPHEN = re.compile(r"^[0-9a-fA-F]{2}(-[0-9a-fA-F]{2}){5}$")
SSH_KEY_START = re.compile(r"(?:^|\s)(?:ssh-[a-z0-9]+|ecdsa-sha2-\S+|sk-\S+)\s+AAAA")
DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
USER_DATA_MAX_BYTES = 256 * 1024


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
    if int(value.replace(":", ""), 16) == 0:
        raise ValidationError(
            "00:00:00:00:00:00 is not a usable MAC address: leave the field empty for an "
            "automatic one, or enter one such as 52:54:00:12:34:56.",
            code="mac_zero",
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


def validate_object_name(value: str) -> None:
    """Names of disks, images, snapshots and SSH keys go into links and file names: no path
    separators, no control characters, not "." or ".."."""
    if value in (".", ".."):
        raise ValidationError(
            '"%(value)s" cannot be a name: use letters or digits too.',
            code="name_dots",
            params={"value": value},
        )
    separators = sorted({char for char in value if char in "/\\"})
    if separators:
        raise ValidationError(
            "A name cannot contain %(chars)s (it would break the object's links): use - instead.",
            code="name_separator",
            params={"chars": " or ".join(f'"{char}"' for char in separators)},
        )
    if any(unicodedata.category(char).startswith("C") for char in value):
        raise ValidationError(
            "A name cannot contain control characters (such as a line break or a tab).",
            code="name_control",
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
    if (count := len(SSH_KEY_START.findall(value))) > 1:
        raise ValidationError(
            "This holds %(count)s keys: add them one at a time, each under its own name.",
            code="ssh_keys_several",
            params={"count": count},
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


def validate_user_data_size(value: str) -> None:
    """User data fits the cap the clouds share (EC2 and GCE take 256 KiB at most)."""
    size = len(value.encode(errors="replace"))
    if size > USER_DATA_MAX_BYTES:
        raise ValidationError(
            "User data is at most %(cap)s KiB, the most clouds accept; this is %(size)s KiB.",
            code="user_data_size",
            params={"cap": USER_DATA_MAX_BYTES // 1024, "size": -(-size // 1024)},
        )


def parse_cloud_config(value: str) -> dict:
    """Custom user data must be `#cloud-config` followed by a YAML mapping, within the cap."""
    validate_user_data_size(value)
    if not value.lstrip().startswith("#cloud-config"):
        raise ValidationError(
            "Custom user data must start with the line #cloud-config.",
            code="cloud_config_header",
        )
    try:
        data = yaml_load(value)
    except YamlRefused as error:
        raise ValidationError(
            "In the cloud-config: %(problem)s",
            code="cloud_config_bounds",
            params={"problem": yaml_problem(error)},
        ) from None
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
    if mistakes := [m for key, value in data.items() if (m := _shape_mistake(key, value))]:
        raise ValidationError(
            "In the cloud-config, %(mistakes)s.",
            code="cloud_config_shape",
            params={"mistakes": "; ".join(mistakes)},
        )
    return data


_LIST, _TEXT, _MAPPING = (list,), (str,), (dict,)
# The shapes of the cloud-config keys a guest most often gets (cloud-init's own documentation
# of its modules): what each holds, and how a message names it.
CLOUD_CONFIG_SHAPES: dict[str, tuple[tuple[type, ...], str]] = {
    "users": ((list, str, dict), "a list of users (or the word default)"),
    "groups": ((list, str, dict), "a list of groups"),
    "ssh_authorized_keys": (_LIST, "a list of public keys"),
    "runcmd": (_LIST, "a list of commands"),
    "bootcmd": (_LIST, "a list of commands"),
    "packages": (_LIST, "a list of package names"),
    "write_files": (_LIST, "a list of files, each with a path and content"),
    "mounts": (_LIST, "a list of mounts"),
    "chpasswd": (_MAPPING, "a mapping (users:, expire:)"),
    "hostname": (_TEXT, "a host name"),
    "fqdn": (_TEXT, "a host name"),
    "timezone": (_TEXT, "a time zone name such as Europe/Paris"),
    "package_update": ((bool,), "true or false"),
    "package_upgrade": ((bool,), "true or false"),
    "ssh_pwauth": ((bool, str), "true or false"),
}


def _shape_mistake(key: object, value: object) -> str:
    """What is wrong with the shape of one top-level key's value; "" when nothing is."""
    if key not in CLOUD_CONFIG_SHAPES or value is None:
        return ""
    types, holds = CLOUD_CONFIG_SHAPES[str(key)]
    if not isinstance(value, types):
        return f"{key} must be {holds}, not {_kind(value)}"
    commands = value if key in ("runcmd", "bootcmd") and isinstance(value, list) else []
    if wrong := [command for command in commands if not isinstance(command, str | list)]:
        return f"each {key} entry must be a command or a list of words, not {_kind(wrong[0])}"
    if key == "write_files" and isinstance(value, list):
        for number, file in enumerate(value, start=1):
            if not isinstance(file, dict) or not isinstance(file.get("path"), str):
                return f"write_files entry {number} must be a mapping with a path"
    return ""


def _kind(value: object) -> str:
    names = {bool: "true/false", int: "a number", float: "a number", str: "text",
             list: "a list", dict: "a mapping"}  # fmt: skip
    return names.get(type(value), type(value).__name__)
