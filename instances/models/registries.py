from django.db import models

from instances import secrets


class RegistryCredential(models.Model):
    """A project's login to one OCI registry, for pulling its container disks; the password
    (or token) is encrypted at rest like cluster tokens."""

    project = models.ForeignKey(
        "instances.Project", on_delete=models.CASCADE, related_name="registry_credentials"
    )
    registry = models.CharField(
        max_length=255, help_text="Host and port as references name it: registry.example.com:5000"
    )
    username = models.CharField(max_length=255)
    password_encrypted = models.TextField(blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project", "registry"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "registry"], name="registry_credential_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.username}@{self.registry}"

    @property
    def password(self) -> str:
        return secrets.decrypt(self.password_encrypted)

    @password.setter
    def password(self, plaintext: str) -> None:
        self.password_encrypted = secrets.encrypt(plaintext)
