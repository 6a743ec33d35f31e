"""Choice sets of the instances app."""

from django.db import models


class Role(models.TextChoices):
    """A member's role in a project. Each role can do everything the roles before it can."""

    VIEWER = "viewer", "Viewer"
    OPERATOR = "operator", "Operator"
    ADMIN = "admin", "Admin"

    @property
    def rank(self) -> int:
        return list(Role).index(self)

    def allows(self, required: "Role") -> bool:
        return self.rank >= required.rank


class Outcome(models.TextChoices):
    SUCCESS = "success", "Success"
    FAILURE = "failure", "Failure"
    DENIED = "denied", "Denied"
