from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiToken(models.Model):
    """A user's personal token for the JSON API, sent as `Authorization: Bearer zop_...`.

    Only the SHA-256 hash of the token is stored: the plaintext is shown once, when the token is
    created, and cannot be read back. The prefix is kept so people can tell their tokens apart.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, help_text="What the token is for, e.g. ci-deploys.")
    prefix = models.CharField(max_length=16, help_text="The token's first characters, for display.")
    token_hash = models.CharField("SHA-256 of the token", max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Empty for a token that does not expire."
    )

    class Meta:
        ordering = ["user", "name"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()
