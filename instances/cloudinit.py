"""The NoCloud seed of an instance: meta-data, user-data and network-config.

The default user data is the seed's default configuration: a `spx` user with sudo, a random
initial password, the selected SSH keys and DNS resolvers (the subnets' own, or the console's
default ones). Custom user data is used as written; the selected SSH keys then go in the
meta-data's `public-keys`, which cloud-init gives to the image's default user. Addresses come
from IPAM, so the network config always carries them statically.
"""

import yaml

from instances.backends.base import CloudInitSeed
from instances.choices import UserDataMode
from instances.models import Instance

DEFAULT_USER = "spx"
SENTINEL = "/var/lib/zopday/ready"


def _dump(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def default_user_data(instance: Instance) -> str:
    keys = [key.public_key for key in instance.ssh_keys.all()]
    resolvers = sorted({r for nic in instance.nics.all() for r in nic.subnet.guest_resolvers})
    config: dict = {
        "hostname": instance.name,
        "users": [
            {
                "name": DEFAULT_USER,
                "groups": ["sudo"],
                "sudo": "ALL=(ALL) NOPASSWD:ALL",
                "shell": "/bin/sh",
                "lock_passwd": False,
                "ssh_authorized_keys": keys,
            }
        ],
        "chpasswd": {
            "expire": True,  # a one-time password: changed at the first login
            "users": [
                {"name": DEFAULT_USER, "password": instance.initial_password, "type": "text"}
            ],
        },
        "ssh_pwauth": not keys,
    }
    if resolvers:
        config["manage_resolv_conf"] = True
        config["resolv_conf"] = {"nameservers": resolvers}
    config["runcmd"] = [f"mkdir -p {SENTINEL.rsplit('/', 1)[0]}", f"touch {SENTINEL}"]
    return "#cloud-config\n" + _dump(config)


def network_config(instance: Instance) -> str:
    ethernets: dict = {}
    for nic in instance.nics.select_related("subnet").order_by("index"):
        subnet = nic.subnet
        entry: dict = {"match": {"macaddress": nic.mac}, "set-name": nic.name, "addresses": []}
        if nic.ipv4 and subnet.network_v4:
            entry["addresses"].append(f"{nic.ipv4}/{subnet.network_v4.prefixlen}")
            if nic.primary and subnet.gateway:
                entry["gateway4"] = subnet.gateway
        if nic.ipv6 and subnet.network_v6:
            entry["addresses"].append(f"{nic.ipv6}/{subnet.network_v6.prefixlen}")
        if subnet.guest_resolvers:
            entry["nameservers"] = {"addresses": subnet.guest_resolvers}
        ethernets[nic.name] = entry
    return _dump({"version": 2, "ethernets": ethernets}) if ethernets else ""


def user_data(instance: Instance) -> str:
    if instance.user_data_mode == UserDataMode.CUSTOM:
        return instance.custom_user_data
    return default_user_data(instance)


def seed_for(instance: Instance) -> CloudInitSeed:
    meta: dict = {"instance-id": instance.machine_id, "local-hostname": instance.name}
    # Custom user data sets up its own users; cloud-init gives these keys to the default user.
    if instance.user_data_mode == UserDataMode.CUSTOM and (
        keys := [key.public_key for key in instance.ssh_keys.all()]
    ):
        meta["public-keys"] = keys
    return CloudInitSeed(
        meta_data=_dump(meta),
        user_data=user_data(instance),
        network_config=network_config(instance),
    )
