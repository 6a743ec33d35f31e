from django.conf import settings
from django.db import models


class ConsoleTicket(models.Model):
    """A one-time pass to open one browser console: issued by the web app, claimed by the proxy.

    Only its SHA-256 is stored; the plaintext travels once, in the websocket subprotocol list
    (never a URL), and one conditional UPDATE claims it, so it opens at most one session.
    """

    token_hash = models.CharField("SHA-256 of the ticket", max_length=64, unique=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="console_tickets"
    )
    instance = models.ForeignKey(
        "instances.Instance", on_delete=models.CASCADE, related_name="console_tickets"
    )
    kind = models.CharField(max_length=16, help_text="serial, vnc or exec")
    read_only = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["expires_at"])]

    def __str__(self) -> str:
        return f"{self.kind} ticket for {self.instance_id} ({self.user_id})"


class ConsoleSession(models.Model):
    """The audit record of one console session: who watched or typed into which console, when,
    how many bytes went each way, and (serial and exec) where its asciicast recording is."""

    project = models.ForeignKey(
        "instances.Project", on_delete=models.CASCADE, related_name="console_sessions"
    )
    instance = models.ForeignKey(
        "instances.Instance",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="console_sessions",
    )
    instance_name = models.CharField(max_length=63)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    username = models.CharField(max_length=150)
    kind = models.CharField(max_length=16)
    read_only = models.BooleanField(default=False)
    started_at = models.DateTimeField(auto_now_add=True, db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    bytes_to_guest = models.BigIntegerField(default=0, help_text="Keystrokes sent to the guest.")
    bytes_from_guest = models.BigIntegerField(default=0, help_text="Output sent to the browser.")
    recording = models.CharField(
        max_length=300, blank=True, help_text="asciicast v2 file, relative to the run folder."
    )
    close_reason = models.CharField(max_length=200, blank=True)
    proxy = models.CharField(
        max_length=120, blank=True, help_text="The console proxy serving it: host/pid/start time."
    )

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["instance", "-started_at"])]

    def __str__(self) -> str:
        return f"{self.username} {self.kind} console of {self.instance_name}"
