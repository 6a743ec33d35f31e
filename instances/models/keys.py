from django.core.exceptions import ValidationError
from django.db import models

from instances.models.naming import NamedInProject
from instances.validators import parse_ssh_public_key, validate_object_name


class SSHKey(NamedInProject, models.Model):
    """A public key in the project's catalog, injected into instances that select it."""

    project = models.ForeignKey(
        "instances.Project", on_delete=models.CASCADE, related_name="ssh_keys"
    )
    name = models.CharField(max_length=100, validators=[validate_object_name])
    public_key = models.TextField()
    fingerprint = models.CharField(max_length=60, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    name_taken = "A key named {name} already exists in this project: choose another name."
    skipped_constraint_fields = ("fingerprint",)  # clean() says it at the key

    class Meta:
        ordering = ["project", "name"]
        verbose_name = "SSH key"
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="ssh_key_name_unique"),
            models.UniqueConstraint(
                fields=["project", "fingerprint"], name="ssh_key_fingerprint_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.fingerprint})"

    def clean(self) -> None:
        try:
            self.public_key, self.fingerprint = parse_ssh_public_key(self.public_key)
        except ValidationError as error:
            raise ValidationError({"public_key": error}) from None
        clash = SSHKey.objects.filter(project_id=self.project_id, fingerprint=self.fingerprint)
        if clash.exclude(pk=self.pk).exists():
            raise ValidationError({"public_key": "This key is already in the project's catalog."})
