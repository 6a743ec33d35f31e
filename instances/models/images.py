import re
from pathlib import Path, PurePosixPath
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from instances.choices import ImageKind, OsType
from instances.validators import validate_object_name

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def claim_of(reference: str) -> tuple[str, str] | None:
    """A cluster volume's (namespace, name) from "namespace/name"; None when it is not one."""
    namespace, _, name = reference.partition("/")
    if DNS_LABEL.fullmatch(namespace) and DNS_LABEL.fullmatch(name):
        return namespace, name
    return None


class Image(models.Model):
    """A bootable or mountable image: the demo kernel+initrd, a qcow2 cloud image, an ISO, or a
    container-disk reference. Images without a project are shared with every project."""

    project = models.ForeignKey(
        "instances.Project",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="images",
        help_text="Empty for images shared with every project.",
    )
    name = models.CharField(max_length=100, validators=[validate_object_name])
    kind = models.CharField(max_length=16, choices=ImageKind.choices)
    os_type = models.CharField(max_length=16, choices=OsType.choices, default=OsType.LINUX)
    path = models.CharField(
        max_length=500,
        blank=True,
        help_text="File (or folder for kernel images) in the images dir.",
    )
    reference = models.CharField(
        max_length=300,
        blank=True,
        help_text="OCI reference of a container image; namespace/name of a cluster volume (PVC), "
        "which KubeVirt instances' disks are cloned from.",
    )
    min_disk_gb = models.PositiveIntegerField(default=1)
    description = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "name"], name="image_name_unique_in_project"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        fields = kwargs.get("update_fields")
        if (fields is None or "kind" in fields) and (message := self.kind_change_refusal()):
            raise ValidationError({"kind": message})
        super().save(*args, **kwargs)

    def clean(self) -> None:
        if message := self.kind_change_refusal():
            raise ValidationError({"kind": message})
        if self.kind == ImageKind.PVC and not claim_of(self.reference):
            raise ValidationError(
                {"reference": "Give the volume as namespace/name (such as golden/debian-12): "
                              "each a DNS label."}
            )  # fmt: skip
        parts = PurePosixPath(self.path).parts
        if self.path and (PurePosixPath(self.path).is_absolute() or ".." in parts):
            raise ValidationError(
                {"path": "Give a path inside the images folder (such as demo): not absolute, "
                         "no \"..\"."}
            )  # fmt: skip

    def kind_change_refusal(self) -> str:
        """Why this image's kind cannot be saved ("" when it can): a kind is fixed once
        registered, as its file was checked as that kind (an ISO read as a qcow2 could name
        host files)."""
        if self._state.adding or self.pk is None:
            return ""
        stored = Image.objects.filter(pk=self.pk).values_list("kind", flat=True).first()
        if stored is None or stored == self.kind:
            return ""
        return (
            f"An image's kind is fixed once it is registered ({self.name} is "
            f"{ImageKind(stored).label}): register the file anew as an image of the other kind."
        )

    @property
    def file(self) -> Path:
        path = Path(self.path)
        return path if path.is_absolute() else settings.ZOPDAY_IMAGES_DIR / path
