from django.db import models


class OutboxMessage(models.Model):
    """A task message written in the transaction of the work that asked for it: the database and
    the queue cannot disagree. Deleted once the broker has it (see services.queueing)."""

    task = models.CharField(max_length=200)
    args = models.JSONField(default=list)
    queue = models.CharField(max_length=200)
    eta = models.DateTimeField(null=True, blank=True)  # run no sooner than this
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return f"{self.task}{tuple(self.args)} on {self.queue}"
