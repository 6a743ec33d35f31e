from django.core.validators import RegexValidator
from django.db import models

from instances import secrets


class CloudAccount(models.Model):
    """Credentials a project provisions with, the secret encrypted at rest. AWS: access keys,
    or access keys plus a role to assume. GCP: a service account key (JSON; its client email is
    kept as the access key id) and the GCP project. Both: a default region and an optional
    endpoint URL (a local moto server for the sandbox, a VPC endpoint, a local fake, ...)."""

    project = models.ForeignKey(
        "instances.Project", on_delete=models.CASCADE, related_name="cloud_accounts"
    )
    provider = models.CharField(max_length=8, default="aws")  # a key of provisioning.clouds
    name = models.CharField(max_length=100)
    default_region = models.CharField(max_length=32, default="us-east-1")
    access_key_id = models.CharField(max_length=128, blank=True)
    secret_access_key_encrypted = models.TextField(blank=True, editable=False)
    role_arn = models.CharField(
        "Role ARN",
        max_length=2048,
        blank=True,
        validators=[
            RegexValidator(
                r"^arn:aws(-cn|-us-gov)?:iam::\d{12}:role/[\w+=,.@/-]{1,512}$",
                "Enter the ARN of an IAM role, such as "
                "arn:aws:iam::123456789012:role/zopday-provisioner.",
                code="role_arn",
            )
        ],
    )
    gcp_project = models.CharField(
        "GCP project", max_length=30, blank=True, help_text="The project GCP jobs provision in."
    )
    endpoint_url = models.URLField(
        "Endpoint URL", blank=True, help_text="Leave empty for the cloud's public endpoints."
    )
    sandbox = models.BooleanField(
        default=False, help_text="A local moto server, not a real cloud: nothing is billed."
    )
    last_checked_at = models.DateTimeField(null=True, blank=True)
    last_check_ok = models.BooleanField(null=True, blank=True)
    last_check_message = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="cloud_account_name_unique")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.provider.upper()})"

    @property
    def secret_access_key(self) -> str:
        return secrets.decrypt(self.secret_access_key_encrypted)

    @secret_access_key.setter
    def secret_access_key(self, plaintext: str) -> None:
        self.secret_access_key_encrypted = secrets.encrypt(plaintext)

    @property
    def has_secret(self) -> bool:
        return bool(self.secret_access_key_encrypted)
