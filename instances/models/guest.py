from typing import TYPE_CHECKING

from django.db import models

from instances.choices import PowerState

if TYPE_CHECKING:
    from instances.models.machines import Instance


class GuestReport(models.Model):
    """The guest agent's last report on a running instance, so pages need not ask the hypervisor.

    `error` says why the latest poll failed; the facts and `reported_at` stay from the last one."""

    instance = models.OneToOneField(
        "instances.Instance", on_delete=models.CASCADE, primary_key=True, related_name="guest"
    )
    hostname = models.CharField(max_length=255, blank=True)
    os = models.CharField(max_length=255, blank=True)  # its pretty name, as the agent says it
    interfaces = models.JSONField(default=list, blank=True)  # [{name, mac, addresses, carrier}]
    memory_total_kb = models.PositiveBigIntegerField(default=0)
    memory_available_kb = models.PositiveBigIntegerField(default=0)
    filesystems = models.JSONField(default=list, blank=True)  # [{mountpoint, type, ...}]
    reported_at = models.DateTimeField(null=True, blank=True)
    error = models.CharField(max_length=300, blank=True)
    asked_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"guest report of {self.instance_id}"

    def current_for(self, instance: "Instance") -> bool:
        """Whether the facts describe the guest as it runs now: it runs, and they were reported
        since it last changed power state (not in an earlier boot)."""
        return (
            instance.power_state == PowerState.RUNNING
            and self.reported_at is not None
            and self.reported_at >= instance.state_changed_at
        )

    @property
    def memory_total_bytes(self) -> int:
        return self.memory_total_kb * 1024

    @property
    def memory_used_bytes(self) -> int:
        return (self.memory_total_kb - self.memory_available_kb) * 1024

    @property
    def memory_used_percent(self) -> int:
        if not self.memory_total_kb:
            return 0
        return round(100 * self.memory_used_bytes / self.memory_total_bytes)
