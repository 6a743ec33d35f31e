from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from instances.choices import SNAPSHOT_TRANSITIONAL, DiskBus, DiskRole, ImageKind, SnapshotState
from instances.containerdisks.errors import ContainerDiskError
from instances.containerdisks.reference import parse_reference
from instances.models.clusters import all_zones, zones_message
from instances.models.naming import NamedInProject
from instances.validators import validate_object_name

# what a root or secondary disk may be made from: a qcow2 file, the demo kernel image, a
# container image's disk, pulled from its registry and copied (persistent, unlike a container
# disk), or a cluster's volume (PVC), cloned
DISK_SOURCE_KINDS = (ImageKind.QCOW2, ImageKind.KERNEL, ImageKind.CONTAINER, ImageKind.PVC)


class Disk(NamedInProject, models.Model):
    """Persistent storage or removable media of a project, in one zone; attached to at most one
    instance. A CD-ROM holds an ISO image; a container disk refers to an OCI image."""

    project = models.ForeignKey("instances.Project", on_delete=models.CASCADE, related_name="disks")
    zone = models.CharField(max_length=32)
    instance = models.ForeignKey(
        "instances.Instance",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="disks",
    )
    # room for the names an instance gives its disks: <instance name (63)>-root, -disk12...
    name = models.CharField(max_length=72, validators=[validate_object_name])
    role = models.CharField(max_length=16, choices=DiskRole.choices, default=DiskRole.SECONDARY)
    size_gb = models.PositiveIntegerField("Size (GB)", default=1)
    image = models.ForeignKey(
        "instances.Image",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="disks",
        help_text="Source image (root disk), ISO (CD-ROM) or OCI reference (container disk).",
    )
    bus = models.CharField(max_length=8, choices=DiskBus.choices, default=DiskBus.AUTO)
    boot_order = models.PositiveSmallIntegerField(null=True, blank=True)
    backend = models.CharField(
        max_length=16, blank=True, editable=False, help_text="Whose disk store holds the file."
    )
    host = models.CharField(
        max_length=100,
        blank=True,
        editable=False,
        help_text="The hypervisor host whose disk store holds the file: that of the instance it "
        "was last attached to; blank for a disk never attached.",
    )
    digest = models.CharField(
        max_length=80,
        blank=True,
        editable=False,
        help_text="The image digest a container disk runs: pinned at its first pull.",
    )
    message = models.CharField(
        max_length=300, blank=True, editable=False, help_text="Why its last hot-plug failed."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    name_taken = "A disk named {name} already exists in this project: choose another name."

    class Meta:
        ordering = ["project", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="disk_name_unique_in_project")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def device_name(self) -> str:
        return f"disk-{self.pk}"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.zone not in (zones := all_zones()):
            errors["zone"] = zones_message(zones)
        elif self.instance_id and self.instance and self.zone != self.instance.zone:
            errors["zone"] = (
                f"The disk is in {self.zone} but the instance is in {self.instance.zone}; "
                "a disk must be in its instance's zone."
            )
        if self.role == DiskRole.CONTAINER:
            errors |= container_disk_errors(self)
        if self.role == DiskRole.CDROM and self.image and self.image.kind != ImageKind.ISO:
            errors["image"] = f"A CD-ROM holds an ISO image; {self.image.name} is not one."
        if self.role == DiskRole.CDROM and self.bus == DiskBus.VIRTIO:
            errors["bus"] = "A CD-ROM drive is on SATA: choose auto or sata."
        if self.role in (DiskRole.ROOT, DiskRole.SECONDARY) and self.image:
            if self.image.kind not in DISK_SOURCE_KINDS:
                errors["image"] = (
                    f"{self.image.name} cannot back a disk; choose a qcow2 or container image."
                )
            elif self.image.kind == ImageKind.CONTAINER and (problem := _reference_problem(self)):
                errors["image"] = problem
            elif (
                self.image.kind == ImageKind.PVC and self.instance and not self.instance.cluster_id
            ):
                errors["image"] = (
                    f"{self.image.name} is a volume of a cluster: run the instance on a cluster, "
                    "or choose another image."
                )
            elif self.size_gb < self.image.min_disk_gb:
                errors["size_gb"] = (
                    f"{self.image.name} needs a disk of at least {self.image.min_disk_gb} GB."
                )
        if self.role == DiskRole.CDROM:
            self.size_gb = 0  # a drive has no size of its own; its medium has
        elif not 1 <= self.size_gb <= 16384:
            errors["size_gb"] = "Disk size must be between 1 and 16384 GB."
        if self.role == DiskRole.ROOT and self.instance_id:
            others = Disk.objects.filter(instance_id=self.instance_id, role=DiskRole.ROOT)
            if others.exclude(pk=self.pk).exists():
                errors["role"] = "An instance has one root disk; add this one as a secondary disk."
        if errors:
            raise ValidationError(errors)


def _reference_problem(disk: Disk) -> str:
    """What is wrong with the OCI reference of the disk's container image ("" when nothing)."""
    assert disk.image is not None
    try:
        parse_reference(disk.image.reference)
    except ContainerDiskError as error:
        return f"{disk.image.name}: {error.message}"
    return ""


def container_disk_errors(disk: Disk) -> dict[str, str]:
    """A container disk holds an OCI image with a valid reference; it has no size of its own."""
    if disk.image is None or disk.image.kind != ImageKind.CONTAINER:
        return {"image": "A container disk holds a container image (an OCI reference)."}
    if problem := _reference_problem(disk):
        return {"image": problem}
    if disk.bus == DiskBus.SATA:
        return {"bus": "A container disk is on virtio: choose auto or virtio."}
    disk.size_gb = max(disk.size_gb, 1)  # the image's own size counts; this is a floor
    return {}


class DiskSnapshot(models.Model):
    """A point-in-time copy of a disk (internal qcow2 snapshot); consistent when the guest agent
    froze the filesystems around it. The disk's file holds it under its name."""

    disk = models.ForeignKey(Disk, on_delete=models.CASCADE, related_name="snapshots")
    name = models.CharField(max_length=63, validators=[validate_object_name])
    state = models.CharField(
        max_length=10, choices=SnapshotState.choices, default=SnapshotState.TAKING
    )
    message = models.CharField(max_length=300, blank=True, help_text="Why it failed.")
    consistent = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now, help_text="When it was taken.")
    state_changed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["disk", "-created_at"]
        constraints = [models.UniqueConstraint(fields=["disk", "name"], name="snapshot_unique")]

    def __str__(self) -> str:
        return f"{self.disk.name}@{self.name}"

    @property
    def in_progress(self) -> bool:
        """The host is working on it (taking, reverting to or deleting it)."""
        return self.state in SNAPSHOT_TRANSITIONAL
