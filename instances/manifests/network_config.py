"""A VirtualMachine's cloud-init network config, read for the static addresses it gives."""

import ipaddress

import yaml

from instances.bounded_yaml import yaml_load, yaml_problem


def static_addresses(network_config: object) -> tuple[dict[str, dict[str, str]], str]:
    """Static addresses by MAC from a network config written by the console (version 2), and
    why it could not be read ("" when it could); what is not the console's shape is skipped."""
    try:
        config = yaml_load(str(network_config)) or {}
    except yaml.YAMLError as error:
        return {}, f"In the network config: {yaml_problem(error)}"
    found: dict[str, dict[str, str]] = {}
    ethernets = config.get("ethernets") if isinstance(config, dict) else None
    for entry in ethernets.values() if isinstance(ethernets, dict) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("match") or {}, dict):
            continue
        mac = str((entry.get("match") or {}).get("macaddress", "")).lower()
        addresses = entry.get("addresses") or []
        for address in addresses if isinstance(addresses, list) else []:
            try:
                ip = ipaddress.ip_interface(str(address)).ip
            except ValueError:
                continue
            found.setdefault(mac, {})["ipv4" if ip.version == 4 else "ipv6"] = str(ip)
    return found, ""
