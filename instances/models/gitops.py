import uuid

from django.conf import settings
from django.db import models

from instances import secrets
from instances.choices import GitAuth, SyncStatus, SyncTrigger


class GitSource(models.Model):
    """The git repository a project follows: each sync applies the manifests found under `path`
    on `branch`. The deploy key or token and the webhook secret are encrypted at rest; what the
    last good sync applied is kept to tell drift (objects changed in the console since)."""

    project = models.OneToOneField(
        "instances.Project", on_delete=models.CASCADE, related_name="git_source"
    )
    url = models.CharField(max_length=500, help_text="https://…, ssh://… or git@host:owner/repo")
    branch = models.CharField(max_length=200, default="main")
    path = models.CharField(
        max_length=300, blank=True, help_text="The folder of the manifests; empty for the root."
    )
    auth = models.CharField(max_length=16, choices=GitAuth.choices, default=GitAuth.NONE)
    credential_encrypted = models.TextField(blank=True, editable=False)
    webhook_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    webhook_secret_encrypted = models.TextField(blank=True, editable=False)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        related_name="+",
        help_text="Syncs apply the manifests as this user (it needs the operator role).",
    )
    applied_sha = models.CharField(max_length=64, blank=True, editable=False)
    applied_sources = models.JSONField(default=list, blank=True, editable=False)
    checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    sync_requested_at = models.DateTimeField(null=True, blank=True, editable=False)
    sync_started_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        where = f"/{self.path}" if self.path else ""
        return f"{self.url}@{self.branch}{where}"

    @property
    def credential(self) -> str:
        return secrets.decrypt(self.credential_encrypted)

    @credential.setter
    def credential(self, plaintext: str) -> None:
        self.credential_encrypted = secrets.encrypt(plaintext)

    @property
    def webhook_secret(self) -> str:
        return secrets.decrypt(self.webhook_secret_encrypted)

    @webhook_secret.setter
    def webhook_secret(self, plaintext: str) -> None:
        self.webhook_secret_encrypted = secrets.encrypt(plaintext)


class GitSync(models.Model):
    """One sync of a git source: the commit it read, the files changed since the last applied
    commit, the plans' diff lines, the problems that stopped it, and the drift it found."""

    source = models.ForeignKey(GitSource, on_delete=models.CASCADE, related_name="syncs")
    trigger = models.CharField(max_length=16, choices=SyncTrigger.choices)
    requested_by = models.CharField(max_length=150, blank=True)
    status = models.CharField(max_length=16, choices=SyncStatus.choices, default=SyncStatus.RUNNING)
    sha = models.CharField(max_length=64, blank=True)
    subject = models.CharField(max_length=300, blank=True)
    author = models.CharField(max_length=300, blank=True)
    files = models.JSONField(default=list, blank=True, help_text="git diff --name-status lines")
    changes = models.JSONField(default=list, blank=True, help_text="The plans' diff lines")
    problems = models.JSONField(default=list, blank=True, help_text="file:line: message")
    drift = models.JSONField(default=list, blank=True)
    message = models.TextField(blank=True)
    refused_content = models.BooleanField(
        default=False,
        help_text="Refused for what the commit holds (unreadable YAML, its bounds, its shape): "
        "polls leave the commit alone until a new one or Sync now.",
    )
    started_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"{self.source} {self.sha[:10] or '(no commit)'} {self.status}"

    @property
    def short_sha(self) -> str:
        return self.sha[:10]


class GitWebhookDelivery(models.Model):
    """A webhook call that queued a sync, kept ZOPDAY_GITOPS_DELIVERY_DAYS so that a replay is
    refused: `key` is the digest of its delivery id or of its body (what the signature covers)."""

    source = models.ForeignKey(GitSource, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=80)
    received_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "key"], name="git_webhook_delivery_once")
        ]

    def __str__(self) -> str:
        return f"{self.source} {self.key}"
