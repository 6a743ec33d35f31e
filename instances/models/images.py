from pathlib import Path, PurePosixPath

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from instances.choices import ImageKind, OsType


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
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=ImageKind.choices)
    os_type = models.CharField(max_length=16, choices=OsType.choices, default=OsType.LINUX)
    path = models.CharField(
        max_length=500,
        blank=True,
        help_text="File (or folder for kernel images) in the images dir.",
    )
    reference = models.CharField(
        max_length=300, blank=True, help_text="OCI reference of a container disk."
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

    def clean(self) -> None:
        parts = PurePosixPath(self.path).parts
        if self.path and (PurePosixPath(self.path).is_absolute() or ".." in parts):
            raise ValidationError(
                {"path": "Give a path inside the images folder (such as demo): not absolute, "
                         "no \"..\"."}
            )  # fmt: skip

    @property
    def file(self) -> Path:
        path = Path(self.path)
        return path if path.is_absolute() else settings.ZOPDAY_IMAGES_DIR / path
