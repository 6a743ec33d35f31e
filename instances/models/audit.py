from django.conf import settings
from django.db import models

from instances.choices import Outcome


class AuditEvent(models.Model):
    """One action someone took: who, what, on which object, when, and how it ended.

    Services write these; nothing edits them afterwards. The actor's name is copied so the trail
    still reads after a user is deleted.
    """

    project = models.ForeignKey(
        "instances.Project",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="audit_events",
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=64, help_text="e.g. instance.start")
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    target_repr = models.CharField(max_length=200, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.SUCCESS)
    message = models.TextField(blank=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.actor_name or 'system'} {self.action} {self.target_repr}".strip()
