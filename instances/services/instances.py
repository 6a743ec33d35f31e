"""Create and delete instances and change their run strategy."""

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction

from instances import actions
from instances.access import project_role
from instances.backends.base import MAX_PCI_DEVICES
from instances.choices import DiskBus, DiskRole, PowerState, Role, RunStrategy
from instances.errors import ActionRefused
from instances.models import Cluster, Disk, Image, Instance, Project, SSHKey, Subnet
from instances.models.clusters import all_zones
from instances.names import name_promised
from instances.services import power
from instances.services.audit import audit_record
from instances.services.network import build_nic, check_nic
from instances.services.queueing import enqueue_host_task
from instances.services.storage import check_room, pci_devices, pci_full

STARTS_ON_CREATE = {RunStrategy.ALWAYS, RunStrategy.RERUN_ON_FAILURE, RunStrategy.ONCE}
AT_LEAST_ONE_NIC = "Attach the instance to at least one subnet."
ROOT_NEEDS_A_SOURCE = (
    "Choose an image for the root disk, or leave it blank and add a CD-ROM with an ISO to "
    "install from."
)


@dataclass
class DiskRequest:
    size_gb: int
    role: str = DiskRole.SECONDARY
    image: Image | None = None
    bus: str = DiskBus.AUTO
    name: str = ""
    boot_order: int | None = None


@dataclass
class NicRequest:
    subnet: Subnet  # one not of the project (unsaved: named but not found) is refused
    ipv4: str = ""
    ipv6: str = ""
    mac: str = ""
    model: str = "virtio"


@dataclass
class InstanceRequest:
    """Everything the create form and the API collect."""

    name: str
    zone: str
    root_image: Image | None  # None: a blank root disk, installed from the CD-ROM
    root_size_gb: int
    root_bus: str = DiskBus.AUTO
    run_strategy: str = RunStrategy.MANUAL
    vcpus: int = 1
    memory_gb: int = 1
    sockets: int | None = None
    cores: int | None = None
    threads: int | None = None
    bootloader: str = "bios"
    secure_boot: bool = False
    persistent_efi: bool = False
    vtpm: bool = False
    user_data_mode: str = "default"
    custom_user_data: str = ""
    ssh_keys: list[SSHKey] = field(default_factory=list)
    disks: list[DiskRequest] = field(default_factory=list)
    nics: list[NicRequest] = field(default_factory=list)
    cluster: str = ""  # a cluster's name: it runs there, on KubeVirt; "": on this console's hosts


INSTANCE_FIELDS = (
    "name", "zone", "run_strategy", "vcpus", "memory_gb", "sockets", "cores", "threads",
    "bootloader", "secure_boot", "persistent_efi", "vtpm", "user_data_mode", "custom_user_data",
)  # fmt: skip


def instance_check(*, project: Project, fields: dict[str, object]) -> None:
    """The instance's own fields (sizing, topology, firmware, cloud-init, a free name, where it
    runs) checked as creating it checks them first, for a form whose other parts have mistakes
    too: all of them show at once. Raises ValidationError keyed by field."""
    placed, errors = _placed(str(fields.get("cluster") or ""))
    instance = Instance(
        project=project, **placed, **{name: fields[name] for name in INSTANCE_FIELDS}
    )
    try:
        instance.full_clean(exclude=["initial_password"])
    except ValidationError as error:
        errors |= error.message_dict
    if errors:
        raise ValidationError(errors)


def instance_request_check(*, project: Project, request: InstanceRequest) -> None:
    """The mistakes of a request that cannot be created as it is (an id in it names nothing,
    reported by the caller): its own fields and each disk and NIC alone, all at once."""
    placed, errors = _placed(request.cluster)
    instance = Instance(
        project=project, **placed, **{name: getattr(request, name) for name in INSTANCE_FIELDS}
    )
    try:
        instance.full_clean(exclude=["initial_password"])
    except ValidationError as error:
        errors |= error.message_dict
    errors = _parts_errors(instance, request) | errors
    if errors:
        raise ValidationError(errors)


def _placed(cluster_name: str) -> tuple[dict[str, object], dict[str, list[str]]]:
    """The fields that say where an instance runs: a cluster named so (KubeVirt), or this
    console's hosts (QEMU); and the mistake, for a name no cluster has."""
    if not cluster_name:
        return {}, {}
    cluster = Cluster.objects.filter(name=cluster_name).first()
    if cluster is None:
        names = ", ".join(Cluster.objects.values_list("name", flat=True))
        where = f" or one of the clusters: {names}" if names else " (there are no clusters)"
        return {}, {"cluster": [f"Choose this console's hosts{where}."]}
    return {"cluster": cluster, "backend": "kubevirt", "host": ""}, {}


def instance_create(
    *, project: Project, actor: AbstractBaseUser, request: InstanceRequest
) -> Instance:
    """Create an instance with its root disk, other disks and NICs, all or nothing: any
    ValidationError rolls the whole transaction back. Starts it if its run strategy says so.
    """
    role = project_role(actor, project)
    if role is None or not role.allows(Role.OPERATOR):
        raise ActionRefused("Creating instances needs the operator role.")
    with transaction.atomic():
        # Under the project's lock, which a provisioning job's creation takes too: a job and an
        # instance asked for at once never both claim one name.
        Project.objects.select_for_update().filter(pk=project.pk).first()
        placed, fields = _placed(request.cluster)
        instance = Instance(
            project=project,
            initial_password=secrets.token_urlsafe(12),
            **placed,
            **{name: getattr(request, name) for name in INSTANCE_FIELDS},
        )
        try:
            instance.full_clean()
        except ValidationError as error:
            fields |= error.message_dict
        if "name" not in fields and (promised := name_promised(project, instance.name)):
            fields["name"] = [promised]
        if fields:  # its disks and NICs checked too, all reported together
            raise ValidationError(_parts_errors(instance, request) | fields)
        instance.save()
        errors: dict[str, list[str]] = {}
        if any(key.project_id != project.pk for key in request.ssh_keys):
            errors["ssh_keys"] = ["Choose SSH keys of this project."]
        instance.ssh_keys.set([key for key in request.ssh_keys if key.project_id == project.pk])
        for prefix, disk in _disk_requests(request):
            with _collected(errors, prefix):
                _create_disk(instance, disk)
        errors.update(_whole_request_errors(request))
        for index, nic in enumerate(request.nics):
            with _collected(errors, f"nics-{index}"):
                build_nic(
                    instance=instance, subnet=nic.subnet, index=index, ipv4=nic.ipv4,
                    ipv6=nic.ipv6, mac=nic.mac, model=nic.model,
                )  # fmt: skip
        if not errors and pci_devices(instance) > MAX_PCI_DEVICES:
            errors["nics"] = [pci_full(instance, "ask for fewer, or give some disks SATA")]
        if errors:
            raise ValidationError(errors)  # and the transaction keeps nothing
        audit_record(
            actor=actor,
            action="instance.create",
            project=project,
            target=instance,
            detail={"vcpus": instance.vcpus, "memory_gb": instance.memory_gb},
        )
    if instance.run_strategy in STARTS_ON_CREATE:
        power.instance_start(instance=instance, actor=actor)
    return instance


def _installs_from_cdrom(request: InstanceRequest) -> bool:
    """A CD-ROM with an ISO, or a container disk, boots over a blank root disk."""
    return any(
        disk.role in (DiskRole.CDROM, DiskRole.CONTAINER) and disk.image for disk in request.disks
    )


def _whole_request_errors(request: InstanceRequest) -> dict[str, list[str]]:
    """Rules on the request as a whole: a root disk has a source, and there is a NIC."""
    errors: dict[str, list[str]] = {}
    if request.root_image is None and not _installs_from_cdrom(request):
        errors["root_image"] = [ROOT_NEEDS_A_SOURCE]
    if not request.nics:
        errors["nics"] = [AT_LEAST_ONE_NIC]
    return errors


def _disk_requests(request: InstanceRequest) -> list[tuple[str, DiskRequest]]:
    """The root disk (its errors keyed root_size_gb, root_image...) and the others (keyed
    disks-0-size_gb...), each with the prefix of its errors. Over a blank root disk, the first
    CD-ROM with an ISO boots next (the firmware passes over a disk with nothing to boot), so
    the installer starts, and the installed system once it is done."""
    blank = request.root_image is None
    root = DiskRequest(
        size_gb=request.root_size_gb,
        role=DiskRole.ROOT,
        image=request.root_image,
        bus=request.root_bus,
        name=f"{request.name}-root",
        boot_order=1,
    )
    named = [
        replace(disk, name=disk.name or f"{request.name}-disk{number}")
        for number, disk in enumerate(request.disks, start=1)
    ]
    installer = next(
        (d for d in named if d.role in (DiskRole.CDROM, DiskRole.CONTAINER) and d.image), None
    )
    if blank and installer is not None and installer.boot_order is None:
        # SeaBIOS passes over a blank disk to a CD-ROM but not to another disk: a container
        # disk boots first
        first = installer.role == DiskRole.CONTAINER
        named = [replace(d, boot_order=1 if first else 2) if d is installer else d for d in named]
        root = replace(root, boot_order=2) if first else root
    return [("root", root), *((f"disks-{n}", disk) for n, disk in enumerate(named))]


@contextmanager
def _collected(errors: dict[str, list[str]], prefix: str) -> Iterator[None]:
    """A disk's or NIC's ValidationError kept in `errors`, keyed as e.g. `nics-0-mac` (the root
    disk's as root_size_gb) so forms show it in place, and the next part checked too."""
    try:
        yield
    except ValidationError as error:
        for name, messages in error.message_dict.items():
            key = ROOT_DISK_FIELDS.get(name, name) if prefix == "root" else f"{prefix}-{name}"
            errors.setdefault(key, []).extend(messages)


ROOT_DISK_FIELDS = {"size_gb": "root_size_gb", "image": "root_image", "bus": "root_bus"}


def _parts_errors(instance: Instance, request: InstanceRequest) -> dict[str, list[str]]:
    """What the disks and NICs would say of themselves, for an instance not saved: each checked
    alone, without the checks that need the others. A wrong zone is the instance's to report:
    its disks take it, and its NICs' subnets are not compared with it."""
    errors: dict[str, list[str]] = {}
    for prefix, disk in _disk_requests(request):
        with _collected(errors, prefix):
            _disk(instance, disk).full_clean(exclude=["instance"])
    for index, nic in enumerate(request.nics):
        with _collected(errors, f"nics-{index}"):
            check_nic(
                instance=instance, subnet=nic.subnet, ipv4=nic.ipv4, ipv6=nic.ipv6,
                mac=nic.mac, model=nic.model, compare_zone=instance.zone in all_zones(),
            )  # fmt: skip
    errors.update(_whole_request_errors(request))
    return {key: messages for key, messages in errors.items() if not key.endswith("zone")}


def _disk(instance: Instance, request: DiskRequest) -> Disk:
    if request.image and request.image.project_id not in (None, instance.project_id):
        raise ValidationError({"image": "Choose an image of this project or a shared one."})
    return Disk(
        project=instance.project,
        zone=instance.zone,
        instance=instance,
        name=request.name,
        role=request.role,
        size_gb=request.size_gb,
        image=request.image,
        bus=request.bus,
        boot_order=request.boot_order,
        backend=instance.backend,
        host=instance.host,
    )


def _create_disk(instance: Instance, request: DiskRequest) -> Disk:
    disk = _disk(instance, request)
    disk.full_clean()
    disk.save()
    check_room(instance, disk, creating=True)  # against the disks made before it
    return disk


def instance_set_run_strategy(
    *, instance: Instance, actor: AbstractBaseUser, strategy: str
) -> None:
    """Change the run strategy and apply it at once: Always starts a stopped instance, Halted
    shuts a running one down."""
    if strategy not in RunStrategy.values:
        raise ValidationError({"run_strategy": f"Choose one of: {', '.join(RunStrategy.values)}."})
    allowed = actions.configure(instance, project_role(actor, instance.project))
    if not allowed:
        raise ActionRefused(allowed.reason)
    with transaction.atomic():
        previous = instance.run_strategy
        instance.run_strategy = strategy
        instance.save(update_fields=["run_strategy"])
        audit_record(
            actor=actor,
            action="instance.set_run_strategy",
            project=instance.project,
            target=instance,
            detail={"from": previous, "to": strategy},
        )
    if strategy == RunStrategy.ALWAYS and instance.power_state in actions.STOPPED_STATES:
        power.instance_start(instance=instance, actor=actor)
    elif strategy == RunStrategy.HALTED and instance.power_state == PowerState.RUNNING:
        power.instance_shutdown(instance=instance, actor=actor)


def instance_delete(*, instance: Instance, actor: AbstractBaseUser, force: bool = False) -> None:
    """Delete a stopped instance (`force`: a running one too, its machine ended): its root disk
    and machine files go, secondary disks stay (detached) and its addresses return to the
    subnets."""
    with transaction.atomic():
        # decided on the row as it is now, under the lock that Start's claim takes too: a start
        # asked at the same moment either waits and finds no instance, or goes first and this
        # is refused
        fresh = Instance.objects.select_for_update().filter(pk=instance.pk).first()
        if fresh is None:
            raise ActionRefused(f"Instance {instance.name} is already deleted.")
        actions.require(actions.delete(fresh, project_role(actor, instance.project), force=force))
        audit_record(
            actor=actor, action="instance.delete", project=instance.project, target=instance
        )
        going = instance.disks.filter(role__in=[DiskRole.ROOT, DiskRole.CDROM])
        disk_names = [disk.device_name for disk in going]
        enqueue_host_task(
            instance, "instances.machine_undefine", instance.backend, instance.machine_id,
            disk_names,
        )  # fmt: skip
        going.delete()
        instance.delete()
