from django.db import models


class ManagedObject(models.Model):
    """An object `manage.py apply` made or took over, by kind and name: `apply --prune` removes
    only these, never what the console or the API made. `object_id` ties a name to an object
    that has none of its own (an Elastic IP is known by its address)."""

    project = models.ForeignKey(
        "instances.Project", on_delete=models.CASCADE, related_name="managed_objects"
    )
    kind = models.CharField(max_length=32)
    name = models.CharField(max_length=100)
    object_id = models.PositiveBigIntegerField(null=True, blank=True)
    applied_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project", "kind", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "kind", "name"], name="managed_object_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"
