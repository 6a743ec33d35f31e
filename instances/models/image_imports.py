from django.conf import settings
from django.db import models

from instances.choices import ImportFormat, ImportStatus, OsType
from instances.url_redaction import url_redacted


class ImageImport(models.Model):
    """An image being downloaded from a URL into a project, with its progress; once checked it
    becomes an Image. A failed or cancelled one leaves no image and no file."""

    project = models.ForeignKey(
        "instances.Project", on_delete=models.CASCADE, related_name="image_imports"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    name = models.CharField(max_length=100)
    format = models.CharField(max_length=8, choices=ImportFormat.choices)
    os_type = models.CharField(max_length=16, choices=OsType.choices, default=OsType.LINUX)
    description = models.CharField(max_length=200, blank=True)
    url = models.URLField(max_length=2000)
    sha256 = models.CharField(max_length=64, blank=True, help_text="Expected SHA-256, hex.")
    status = models.CharField(
        max_length=12, choices=ImportStatus.choices, default=ImportStatus.QUEUED
    )
    attempt = models.PositiveIntegerField(default=1, help_text="Bumped by each retry.")
    bytes_done = models.BigIntegerField(default=0)
    bytes_total = models.BigIntegerField(null=True, blank=True, help_text="Content-Length.")
    bytes_reserved = models.BigIntegerField(
        default=0, help_text="Bytes of the project's image quota held for it while it runs."
    )
    rate = models.BigIntegerField(default=0, help_text="Bytes per second, lately.")
    message = models.TextField(blank=True)
    error_field = models.CharField(max_length=16, blank=True, help_text="url or sha256.")
    image = models.ForeignKey(
        "instances.Image", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    sent_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When it went to the import workers; empty while it waits for a free slot.",
    )  # fmt: skip
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.name} from {self.shown_url}"

    @property
    def shown_url(self) -> str:
        """The address as pages, answers and exports show it: without its login or signature."""
        return url_redacted(self.url)

    @property
    def percent(self) -> int | None:
        if not self.bytes_total:
            return None
        return min(100, self.bytes_done * 100 // self.bytes_total)

    @property
    def waiting(self) -> bool:
        """Queued behind the project's other imports (services.import_slots)."""
        return self.status == ImportStatus.QUEUED and self.sent_at is None

    @property
    def seconds_left(self) -> int | None:
        if not self.bytes_total or not self.rate:
            return None
        return max(0, (self.bytes_total - self.bytes_done) // self.rate)
