"""Disks: create, attach, detach, resize; CD-ROM insert and eject. (Snapshots: snapshots.py.)"""

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, Q

from instances import actions, row_rules
from instances.access import project_role
from instances.backends import is_local_backend
from instances.backends.base import HOTPLUG_DISKS, MAX_PCI_DEVICES, MAX_SATA_DEVICES
from instances.choices import DiskBus, DiskRole, ImageKind, PowerState
from instances.disk_full import freeing_space
from instances.errors import ActionRefused
from instances.models import Disk, Image, Instance, Project
from instances.services.audit import audit_record
from instances.services.queueing import enqueue_host_task, enqueue_on_host
from instances.specs import effective_bus


@transaction.atomic
def disk_create(
    *,
    project: Project,
    actor: AbstractBaseUser,
    name: str,
    zone: str,
    size_gb: int,
    bus: str = "auto",
    image: Image | None = None,
    role: str = DiskRole.SECONDARY,
) -> Disk:
    actions.require(actions.manage(project_role(actor, project)))
    disk = Disk(
        project=project, zone=zone, name=name, size_gb=size_gb, bus=bus, image=image, role=role
    )
    disk.full_clean()
    disk.save()
    audit_record(actor=actor, action="disk.create", project=project, target=disk)
    return disk


def disk_check(
    *, project: Project, name: str, zone: str, size_gb: int, bus: str, role: str
) -> None:
    """What disk_create would say of these fields, for a request with another mistake too (an
    image it names is not found), so that all of them are reported at once."""
    Disk(project=project, zone=zone, name=name, size_gb=size_gb, bus=bus, role=role).full_clean(
        exclude=["image"]
    )


def disk_add(
    *,
    instance: Instance,
    actor: AbstractBaseUser,
    name: str,
    size_gb: int,
    bus: str = "auto",
    image: Image | None = None,
    role: str = DiskRole.SECONDARY,
) -> Disk:
    """A new disk in the instance's zone, attached to it: one change, so a refused attach keeps
    no new disk (nor its name)."""
    with transaction.atomic():
        disk = disk_create(
            project=instance.project, actor=actor, name=name, zone=instance.zone,
            size_gb=size_gb, bus=bus, image=image, role=role,
        )  # fmt: skip
        disk_attach(disk=disk, instance=instance, actor=actor)
    return disk


def disk_attach(*, disk: Disk, instance: Instance, actor: AbstractBaseUser) -> None:
    """Attach a free disk; a running instance gets it hot-plugged (virtio) at once."""
    role = project_role(actor, instance.project)
    actions.require(actions.configure(instance, role))
    if disk.project_id != instance.project_id:
        raise ValidationError({"disk": "Choose a disk of this project."})
    if disk.instance_id and disk.instance_id != instance.pk:
        raise _attached_elsewhere(disk.name, disk.instance)
    with transaction.atomic():
        _lock_power_state(instance)
        actions.require(actions.configure(instance, role))
        if (
            disk.role == DiskRole.ROOT
            and instance.disks.filter(role=DiskRole.ROOT).exclude(pk=disk.pk).exists()
        ):
            raise ValidationError({"disk": f"{instance.name} already has a root disk."})
        running = instance.power_state == PowerState.RUNNING
        if running and (disk.role == DiskRole.CDROM or effective_bus(disk) != DiskBus.VIRTIO):
            raise ActionRefused(
                f"Only virtio disks are plugged into a running instance: stop {instance.name} "
                f"to attach {disk.name} (SATA or CD-ROM)."
            )
        if running and instance.hotplugged_disks >= HOTPLUG_DISKS:
            raise ActionRefused(
                f"{instance.name} took {HOTPLUG_DISKS} disks while running, as many as it can "
                f"until its next start: stop it to attach {disk.name}."
            )
        check_room(instance, disk)
        held_elsewhere = (disk.backend, disk.host) != (instance.backend, instance.host)
        if disk.host and is_local_backend(disk.backend) and held_elsewhere:
            # its file stays on its host: attached on another, the disk would start empty
            raise ValidationError(
                {
                    "disk": f"{disk.name}'s file is on host {disk.host} and {instance.name} "
                    f"runs on {instance.host}: attach it to an instance on {disk.host}."
                }
            )
        disk.instance, disk.backend, disk.host = instance, instance.backend, instance.host
        disk.full_clean()
        # the disk was read before this transaction: it is taken only if still free (or ours)
        if not Disk.objects.filter(Q(instance=None) | Q(instance=instance), pk=disk.pk).update(
            instance=instance, backend=instance.backend, host=instance.host, message=""
        ):
            holder = Disk.objects.filter(pk=disk.pk).values_list("instance__name", flat=True)
            if not holder:
                raise ActionRefused(f"{disk.name} has been deleted.")
            raise _attached_elsewhere(disk.name, holder[0])
        audit_record(actor=actor, action="disk.attach", project=instance.project, target=disk,
                     detail={"instance": instance.name})  # fmt: skip
        if running:
            Instance.objects.filter(pk=instance.pk).update(
                hotplugged_disks=F("hotplugged_disks") + 1
            )
            enqueue_host_task(instance, "instances.disk_hotplug", disk.pk)


def check_room(instance: Instance, disk: Disk, *, creating: bool = False) -> None:
    """Whether the instance's machine holds one more disk (one being created with it, or a
    free one attached): its boot order must be free, and SATA disks and CD-ROM drives share one
    controller's ports."""
    others = list(instance.disks.select_related("image").exclude(pk=disk.pk))
    if disk.boot_order is not None:
        taken = next((d for d in others if d.boot_order == disk.boot_order), None)
        if taken is not None:
            fix = (
                "give this disk another (lower boots first; the root disk is 1)"
                if creating
                else f"detach {taken.name} first"
            )
            raise ValidationError(
                {
                    "boot_order": f"{taken.name} already boots at order {disk.boot_order} on "
                    f"{instance.name}: {fix}."
                }
            )
    virtio = [d for d in others if effective_bus(d) == DiskBus.VIRTIO]
    if effective_bus(disk) == DiskBus.VIRTIO and (
        len(virtio) + instance.nics.count() >= MAX_PCI_DEVICES
    ):
        fix = "give the disk SATA, or ask for fewer" if creating else "detach one first"
        raise ValidationError({"disk": pci_full(instance, fix)})
    sata = [d for d in others if effective_bus(d) == DiskBus.SATA]
    if effective_bus(disk) == DiskBus.SATA and len(sata) >= MAX_SATA_DEVICES:
        fix = "give the disks virtio, or ask for fewer" if creating else "detach one first"
        raise ValidationError(
            {
                "disk": f"{instance.name} has {MAX_SATA_DEVICES} SATA disks and CD-ROM drives, "
                f"as many as an instance holds: {fix}."
            }
        )


def pci_full(instance: Instance, fix: str) -> str:
    return (
        f"{instance.name} has {MAX_PCI_DEVICES} virtio disks and interfaces together, as many "
        f"as its machine holds: {fix}."
    )


def pci_devices(instance: Instance) -> int:
    """The instance's virtio disks and interfaces: each takes a PCIe slot of its machine."""
    disks = instance.disks.select_related("image")
    return sum(effective_bus(d) == DiskBus.VIRTIO for d in disks) + instance.nics.count()


def _attached_elsewhere(name: str, holder: object) -> ValidationError:
    return ValidationError({"disk": f"{name} is attached to {holder}; detach it first."})


def _lock_power_state(instance: Instance) -> None:
    """Lock the instance's row until the transaction ends and read its power state afresh: a
    Start claimed meanwhile is seen here, and one claimed later waits for this change."""
    row = (
        Instance.objects.select_for_update()
        .filter(pk=instance.pk)
        .values_list("power_state", "hotplugged_disks")
        .first()
    )
    if row is None:
        raise ActionRefused(f"{instance.name} has been deleted.")
    instance.power_state, instance.hotplugged_disks = row


def disk_detach(*, disk: Disk, actor: AbstractBaseUser) -> None:
    """Detach a persistent disk from its stopped instance (the seed's rule)."""
    instance = disk.instance
    if instance is None:
        raise ActionRefused(f"{disk.name} is not attached.")
    role = project_role(actor, instance.project)
    actions.require(row_rules.disk_detach(disk, role))
    with transaction.atomic():
        _lock_power_state(instance)
        actions.require(actions.detach_disk(instance, role))
        if not Disk.objects.filter(pk=disk.pk, instance=instance).update(instance=None):
            raise ActionRefused(f"{disk.name} is no longer attached to {instance.name}.")
        disk.instance = None
        audit_record(actor=actor, action="disk.detach", project=instance.project, target=disk,
                     detail={"instance": instance.name})  # fmt: skip


def disk_delete(*, disk: Disk, actor: AbstractBaseUser) -> None:
    """Delete a free disk, its snapshots and, on the host that holds it, its file."""
    actions.require(actions.manage(project_role(actor, disk.project)))
    freeing_space(lambda: _disk_delete(disk, actor))


def _disk_delete(disk: Disk, actor: AbstractBaseUser) -> None:
    with transaction.atomic():
        # taken only if still free: an attach at the same moment either goes first (and this is
        # refused) or finds the disk gone
        if not Disk.objects.filter(pk=disk.pk, instance=None).exists():
            holder = Disk.objects.filter(pk=disk.pk).values_list("instance__name", flat=True)
            if not holder:
                raise ActionRefused(f"{disk.name} has been deleted.")
            raise ActionRefused(f"{disk.name} is attached to {holder[0]}: detach it first.")
        audit_record(actor=actor, action="disk.delete", project=disk.project, target=disk)
        device_name = disk.device_name
        Disk.objects.filter(pk=disk.pk, instance=None).delete()
        if disk.host:
            enqueue_on_host(disk.host, "instances.disk_file_delete", disk.backend, device_name)


def disk_resize(*, disk: Disk, actor: AbstractBaseUser, size_gb: int) -> None:
    """Grow a disk (shrinking would destroy data, so it is refused)."""
    role = project_role(actor, disk.project)
    actions.require(row_rules.disk_resize(disk, role))
    if size_gb <= disk.size_gb:
        raise ValidationError(
            {"size_gb": f"Disks can only grow: enter more than the current {disk.size_gb} GB."}
        )
    if size_gb > 16384:
        raise ValidationError({"size_gb": "Disk size must be between 1 and 16384 GB."})
    with transaction.atomic():
        # from the size this request read: of two resizes at once, a smaller one never wins
        if not Disk.objects.filter(pk=disk.pk, size_gb=disk.size_gb).update(size_gb=size_gb):
            disk.refresh_from_db(fields=["size_gb"])
            raise ValidationError(
                {
                    "size_gb": f"{disk.name} was just resized to {disk.size_gb} GB by another "
                    "request; enter more than that to grow it further."
                }
            )
        previous, disk.size_gb = disk.size_gb, size_gb
        audit_record(actor=actor, action="disk.resize", project=disk.project, target=disk,
                     detail={"from_gb": previous, "to_gb": size_gb})  # fmt: skip
        if disk.instance:
            enqueue_host_task(disk.instance, "instances.disk_resize", disk.pk)


def cdrom_insert(*, disk: Disk, actor: AbstractBaseUser, image: Image) -> None:
    _change_media(disk, actor, image)


def cdrom_eject(*, disk: Disk, actor: AbstractBaseUser) -> None:
    _change_media(disk, actor, None)


def _change_media(disk: Disk, actor: AbstractBaseUser, image: Image | None) -> None:
    role = project_role(actor, disk.project)
    allowed = row_rules.cdrom_change(disk, role)
    if allowed.field:  # not a CD-ROM drive: the request's mistake, said first
        actions.require(allowed)
    if image is not None and image.kind != ImageKind.ISO:
        raise ValidationError({"image": f"{image.name} is not an ISO image."})
    if image is not None and image.project_id not in (None, disk.project_id):
        raise ValidationError({"image": "Choose an ISO of this project or a shared one."})
    actions.require(allowed)
    with transaction.atomic():
        disk.image = image
        disk.save(update_fields=["image"])
        audit_record(actor=actor, action="cdrom.insert" if image else "cdrom.eject",
                     project=disk.project, target=disk,
                     detail={"image": image.name if image else None})  # fmt: skip
        if disk.instance and disk.instance.power_state == PowerState.RUNNING:
            enqueue_host_task(disk.instance, "instances.cdrom_change", disk.pk)
