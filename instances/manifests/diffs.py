"""Comparing an existing instance with its document, field by field.

Only what a service can change becomes a step (run strategy, disk sizes, disks and interfaces
added or left out, link states); any other difference is a problem. Disks match by name,
interfaces by position (the n-th is eth<n>). Removals run first (they need a stopped instance
and free eth indexes), the run strategy last (Always starts the instance, which then refuses).
"""

import ipaddress
from collections.abc import Callable, Mapping
from functools import partial

from django.contrib.auth.models import AbstractBaseUser

from instances.choices import DiskRole, LinkState
from instances.manifests.documents import Document
from instances.manifests.errors import ManifestInvalid, Problem
from instances.manifests.schemas import InstanceSpec, NicSpec
from instances.manifests.steps import Plan, Step
from instances.models import Disk, Instance, NetworkInterface
from instances.services import network, storage
from instances.services.instances import (
    AT_LEAST_ONE_NIC,
    DiskRequest,
    InstanceRequest,
    NicRequest,
    instance_set_run_strategy,
)

CONFIRM_PRIMARY = "Set confirm_primary: true on this interface to take it down anyway."

# Fields the instance was created with and no service changes.
CREATED_WITH = (
    "zone",
    "vcpus",
    "memory_gb",
    "sockets",
    "cores",
    "threads",
    "bootloader",
    "secure_boot",
    "persistent_efi",
    "vtpm",
    "user_data_mode",
)
PHASES = ("remove", "resize", "add", "link", "run_strategy")


def _shown(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def plan_update(
    *,
    document: Document,
    label: str,
    instance: Instance,
    actor: AbstractBaseUser,
    spec: InstanceSpec,
    request: InstanceRequest,
) -> Plan:
    diff = _Diff(document.where, instance, actor)
    diff.compare_instance(request)
    diff.compare_disks(request)
    diff.compare_nics(spec, request)
    if diff.problems:
        raise ManifestInvalid(diff.problems)
    plan = Plan(document, label)
    for phase in PHASES:
        for line, step in diff.phases[phase]:
            plan.lines.append(line)
            plan.steps.append(step)
    plan.verb = "change" if plan.steps else "unchanged"
    return plan


class _Diff:
    def __init__(self, where: str, instance: Instance, actor: AbstractBaseUser) -> None:
        self.where = where
        self.instance = instance
        self.actor = actor
        self.problems: list[Problem] = []
        self.phases: dict[str, list[tuple[str, Step]]] = {phase: [] for phase in PHASES}

    def change(
        self,
        phase: str,
        line: str,
        run: Callable[[], object],
        *,
        path: str,
        prefix: str = "",
        keys: Mapping[str, str] | None = None,
        hint: str = "",
    ) -> None:
        step = Step(run, path=path, prefix=prefix, keys=keys or {}, hint=hint)
        self.phases[phase].append((line, step))

    def problem(self, path: str, message: str) -> None:
        self.problems.append(Problem(self.where, path, message))

    def created_with(self, path: str, current: object, wanted: object) -> None:
        self.problem(
            path,
            f"Cannot change on an existing instance: {self.instance.name} has "
            f"{_shown(current)}, the manifest says {_shown(wanted)}. Keep {_shown(current)}, "
            "or create a new instance under another name.",
        )

    # The instance and its root disk

    def compare_instance(self, request: InstanceRequest) -> None:
        instance = self.instance
        for name in CREATED_WITH:
            if getattr(instance, name) != getattr(request, name):
                self.created_with(name, getattr(instance, name), getattr(request, name))
        if instance.custom_user_data != request.custom_user_data:
            self.problem(
                "custom_user_data",
                "Cannot change on an existing instance: cloud-init reads the user data at the "
                "first boot only. Put back the user data it was created with, or create a new "
                "instance under another name.",
            )
        current_keys = sorted(key.name for key in instance.ssh_keys.all())
        wanted_keys = sorted(key.name for key in request.ssh_keys)
        if current_keys != wanted_keys:
            self.created_with("ssh_keys", ", ".join(current_keys), ", ".join(wanted_keys))
        root = instance.disks.filter(role=DiskRole.ROOT).select_related("image").first()
        if root is not None:
            if root.image_id != (request.root_image.pk if request.root_image else None):
                self.created_with("root_image", root.image, request.root_image)
            if root.bus != request.root_bus:
                self.created_with("root_bus", root.bus, request.root_bus)
            if root.size_gb != request.root_size_gb:
                self.change(
                    "resize",
                    f"~ disk {root.name}: size {root.size_gb} GB -> {request.root_size_gb} GB",
                    partial(
                        storage.disk_resize,
                        disk=root,
                        actor=self.actor,
                        size_gb=request.root_size_gb,
                    ),
                    path="root_size_gb",
                    keys={"size_gb": "root_size_gb"},
                )
        if instance.run_strategy != request.run_strategy:
            self.change(
                "run_strategy",
                f"~ run_strategy {instance.run_strategy} -> {request.run_strategy}",
                partial(
                    instance_set_run_strategy,
                    instance=instance,
                    actor=self.actor,
                    strategy=request.run_strategy,
                ),
                path="run_strategy",
            )

    # Disks: matched by name

    def compare_disks(self, request: InstanceRequest) -> None:
        instance = self.instance
        attached = {
            disk.name: disk
            for disk in instance.disks.exclude(role=DiskRole.ROOT).select_related("image")
        }
        listed: dict[str, int] = {}
        for number, wanted in enumerate(request.disks):
            name = wanted.name or f"{instance.name}-disk{number + 1}"
            prefix = f"disks-{number}"
            if name in listed:
                self.problem(f"{prefix}-name", f"{name} is already listed as disks-{listed[name]}.")
                continue
            listed[name] = number
            if name in attached:
                self.compare_disk(prefix, attached[name], wanted, "resize")
                continue
            free = instance.project.disks.filter(name=name).select_related("image").first()
            if free is not None:
                self.change(
                    "add",
                    f"+ disk {name} (attach the existing {free.size_gb} GB disk)",
                    partial(storage.disk_attach, disk=free, instance=instance, actor=self.actor),
                    path=prefix,
                    prefix=prefix,
                    keys={"disk": prefix},
                )
                self.compare_disk(prefix, free, wanted, "add")
            else:
                self.add_disk(prefix, name, wanted)
        for name, disk in attached.items():
            if name not in listed:
                self.change(
                    "remove",
                    f"- disk {name} (detach: it stays in the project)",
                    partial(storage.disk_detach, disk=disk, actor=self.actor),
                    path="disks",
                    hint=f"{name} is attached but not in the manifest",
                )

    def compare_disk(self, prefix: str, disk: Disk, wanted: DiskRequest, phase: str) -> None:
        for field, current, desired in (
            ("role", disk.role, wanted.role),
            ("image", disk.image, wanted.image),
            ("bus", disk.bus, wanted.bus),
            ("boot_order", disk.boot_order, wanted.boot_order),
        ):
            if current != desired:
                self.problem(
                    f"{prefix}-{field}",
                    f"A disk's {field} cannot change: {disk.name} has {_shown(current)}, the "
                    f"manifest says {_shown(desired)}. Keep {_shown(current)}, or add a new "
                    "disk under another name.",
                )
        if disk.role != DiskRole.CDROM and disk.size_gb != wanted.size_gb:
            self.change(
                phase,
                f"~ disk {disk.name}: size {disk.size_gb} GB -> {wanted.size_gb} GB",
                partial(storage.disk_resize, disk=disk, actor=self.actor, size_gb=wanted.size_gb),
                path=f"{prefix}-size_gb",
                prefix=prefix,
            )

    def add_disk(self, prefix: str, name: str, wanted: DiskRequest) -> None:
        if wanted.boot_order is not None:
            self.problem(
                f"{prefix}-boot_order",
                "A boot order is given when an instance is created; leave it out for a disk "
                "added later.",
            )
        instance, actor = self.instance, self.actor

        def create_and_attach() -> None:
            storage.disk_add(
                instance=instance,
                actor=actor,
                name=name,
                size_gb=wanted.size_gb,
                bus=wanted.bus,
                image=wanted.image,
                role=wanted.role,
            )

        image = f", image {wanted.image.name}" if wanted.image else ""
        line = f"+ disk {name} {wanted.size_gb} GB ({wanted.role}{image})"
        self.change("add", line, create_and_attach, path=prefix, prefix=prefix)

    # Interfaces: matched by position

    def compare_nics(self, spec: InstanceSpec, request: InstanceRequest) -> None:
        if not request.nics:
            self.problem("nics", AT_LEAST_ONE_NIC)
            return
        current = {nic.index: nic for nic in self.instance.nics.select_related("subnet")}
        for index, nic in sorted(current.items()):
            if index >= len(request.nics):
                self.change(
                    "remove",
                    f"- nic {nic.name} (on {nic.subnet.name})",
                    partial(network.nic_remove, nic=nic, actor=self.actor),
                    path="nics",
                    hint=f"{nic.name} is not in the manifest",
                )
        for index, (nic_spec, wanted) in enumerate(zip(spec.nics, request.nics, strict=True)):
            if index in current:
                self.compare_nic(index, current[index], nic_spec, wanted)
            else:
                self.add_nic(index, nic_spec, wanted)

    def compare_nic(
        self, index: int, nic: NetworkInterface, nic_spec: NicSpec, wanted: NicRequest
    ) -> None:
        given = {
            "subnet": (nic.subnet, wanted.subnet),
            "model": (nic.model, wanted.model),
            "mac": (nic.mac, wanted.mac.strip().lower()),
            "ipv4": (nic.ipv4, wanted.ipv4.strip()),
            "ipv6": (nic.ipv6, wanted.ipv6.strip()),
        }
        for field, (current, desired) in given.items():
            if desired and current != desired and not _same_address(current, desired):
                self.problem(
                    f"nics-{index}-{field}",
                    f"An interface's {field} cannot change: {nic.name} has {_shown(current)}, "
                    f"the manifest says {_shown(desired)}. Keep {_shown(current)}, or remove "
                    "the interface and add a new one.",
                )
        if nic.link_desired != nic_spec.link:
            self.set_link(index, lambda: nic, nic.link_desired, nic_spec)

    def add_nic(self, index: int, nic_spec: NicSpec, wanted: NicRequest) -> None:
        added: list[NetworkInterface] = []
        instance, actor = self.instance, self.actor

        def add() -> None:
            added.append(
                network.nic_add(
                    instance=instance,
                    actor=actor,
                    subnet=wanted.subnet,
                    ipv4=wanted.ipv4,
                    ipv6=wanted.ipv6,
                    mac=wanted.mac,
                    model=wanted.model,
                )
            )

        address = ", ".join(a for a in (wanted.ipv4, wanted.ipv6, wanted.mac) if a)
        line = f"+ nic eth{index} on {wanted.subnet.name}" + (f" ({address})" if address else "")
        self.change("add", line, add, path=f"nics-{index}", prefix=f"nics-{index}")
        if nic_spec.link != LinkState.UP:
            self.set_link(index, lambda: added[0], LinkState.UP, nic_spec)

    def set_link(
        self, index: int, nic: Callable[[], NetworkInterface], current: str, nic_spec: NicSpec
    ) -> None:
        """`nic` gives the interface when the step runs: one added by an earlier step has no
        row while planning."""
        up, confirm, actor = nic_spec.link == LinkState.UP, nic_spec.confirm_primary, self.actor
        self.change(
            "link",
            f"~ nic eth{index}: link {current} -> {nic_spec.link}",
            lambda: network.nic_set_link(nic=nic(), actor=actor, up=up, confirm_primary=confirm),
            path=f"nics-{index}-link",
            hint=CONFIRM_PRIMARY if index == 0 and not up and not confirm else "",
        )


def _same_address(current: object, desired: object) -> bool:
    """Two spellings of one IPv6 address are the same address."""
    try:
        return ipaddress.ip_address(str(current)) == ipaddress.ip_address(str(desired))
    except ValueError:
        return False
