"""Instances as the console's own kind: planned by plans.py, exported here as the spec that
plans.py takes back as no change (references by name, addresses only where they are static)."""

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from instances.allowed import STOPPED_STATES
from instances.choices import DiskRole, IpMode, LinkState, UserDataMode
from instances.errors import ActionRefused
from instances.manifests.kinds import Kind
from instances.manifests.plans import plan_instance
from instances.models import Instance
from instances.redaction import user_data_redacted
from instances.services.instances import instance_delete

SETTINGS = (
    "zone", "run_strategy", "vcpus", "memory_gb", "sockets", "cores", "threads", "bootloader",
    "secure_boot", "persistent_efi", "vtpm", "user_data_mode",
)  # fmt: skip


def instance_spec(instance: Instance, redact: bool) -> dict[str, Any]:
    """The spec of an instance's document; `redact` hides the user data's credentials (apply
    then refuses the export rather than change them)."""
    spec: dict[str, Any] = {name: getattr(instance, name) for name in SETTINGS}
    if instance.user_data_mode == UserDataMode.CUSTOM:
        text = instance.custom_user_data
        spec["custom_user_data"] = user_data_redacted(text) if redact else text
    disks = list(instance.disks.select_related("image").order_by("pk"))
    root = next((disk for disk in disks if disk.role == DiskRole.ROOT), None)
    if root is not None:
        spec["root_image"] = root.image.name if root.image else None
        spec["root_size_gb"] = root.size_gb
        spec["root_bus"] = root.bus
    spec["ssh_keys"] = sorted(key.name for key in instance.ssh_keys.all())
    spec["disks"] = [
        {
            "name": disk.name,
            "size_gb": disk.size_gb,
            "role": disk.role,
            "image": disk.image.name if disk.image else None,
            "bus": disk.bus,
            "boot_order": disk.boot_order,
        }
        for disk in disks
        if disk is not root
    ]
    spec["nics"] = [_nic(nic) for nic in instance.nics.select_related("subnet").order_by("index")]
    if instance.cluster is not None:
        spec["cluster"] = instance.cluster.name
    return spec


def _nic(nic: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"subnet": nic.subnet.name, "model": nic.model}
    if nic.ip_mode == IpMode.STATIC:
        found.update(ipv4=nic.ipv4 or "", ipv6=nic.ipv6 or "")
    if nic.mac_static:
        found["mac"] = nic.mac
    if nic.link_desired != LinkState.UP:
        found["link"] = nic.link_desired
        if nic.index == 0:
            found["confirm_primary"] = True
    return found


def _delete(instance: Instance, actor: AbstractBaseUser, force: bool) -> None:
    if instance.power_state not in STOPPED_STATES and not force:
        raise ActionRefused(
            f"{instance.name} is {instance.get_power_state_display().lower()}: stop it first, "
            "or prune with --force to end it."
        )
    instance_delete(instance=instance, actor=actor, force=force)


INSTANCE = Kind(
    name="Instance",
    order=50,
    plan=plan_instance,
    find=lambda project, name: project.instances.filter(name=name).first(),
    objects=lambda project: project.instances.order_by("name"),
    spec_of=instance_spec,
    delete=_delete,
)
