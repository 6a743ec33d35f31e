"""A running step's log lines and the job's InfraConfig, written through to the database in
batches so the progress page shows them live without an UPDATE per line."""

import time
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from provisioning.choices import StepStatus
from provisioning.infra import InfraConfig
from provisioning.models import JobStep, ProvisioningJob

# A step's log lines and InfraConfig changes are written through at most this often; the rest wait
# for the next write, the heartbeat or the end of the step (the progress page polls every second).
FLUSH_SECONDS = 0.5


class StepWriter:
    """The running step's log lines and InfraConfig, written through but batched by FLUSH_SECONDS so
    the progress page stays live on few UPDATEs. A killed worker may lose unwritten ones safely:
    the step's next attempt finds its resources by tag."""

    def __init__(self, job: ProvisioningJob, step: JobStep, config: InfraConfig) -> None:
        self.job, self.step, self.config = job, step, config
        self.lines: list[dict[str, str]] = list(step.log or [])
        self.log_pending = self.config_pending = False
        self.last_flush = self.last_beat = time.monotonic()

    def log(self, line: str) -> None:
        self.lines.append({"at": timezone.now().isoformat(timespec="seconds"), "line": line})
        self.log_pending = True
        self._flush_if_due()

    def save(self) -> None:
        self.config_pending = True
        self._flush_if_due()

    def heartbeat(self) -> None:
        """Called while a step waits: write what is pending, and renew the lease every 2 s."""
        self._flush_if_due()
        if time.monotonic() - self.last_beat < 2:
            return
        self.last_beat = time.monotonic()
        JobStep.objects.filter(pk=self.step.pk, status=StepStatus.RUNNING).update(
            lease_until=lease_end()
        )

    def _flush_if_due(self) -> None:
        if time.monotonic() - self.last_flush >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self.config_pending:
            self._write_config()
        if self.log_pending:
            JobStep.objects.filter(pk=self.step.pk).update(log=self.lines)
            self.log_pending = False
        self.last_flush = time.monotonic()

    def finish(self, **outcome: object) -> None:
        """The end of the step: the config (which also marks the job as active) and the step's
        log together with its outcome, one UPDATE each."""
        self._write_config()
        JobStep.objects.filter(pk=self.step.pk).update(log=self.lines, **outcome)
        self.log_pending = False

    def _write_config(self) -> None:
        ProvisioningJob.objects.filter(pk=self.job.pk).update(
            config=self.config.to_json(), updated_at=timezone.now()
        )
        self.config_pending = False


def lease_end() -> datetime:
    return timezone.now() + timedelta(seconds=settings.ZOPDAY_PROVISIONING_LEASE_SECONDS)
