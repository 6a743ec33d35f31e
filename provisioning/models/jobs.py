import secrets as random

from django.conf import settings
from django.db import models

from provisioning.choices import (
    JOB_TRANSITIONAL,
    JobStatus,
    Phase,
    PoolMode,
    StepStatus,
)


def _token() -> str:
    return random.token_hex(6)


class ProvisioningJob(models.Model):
    """One VM environment: where it lives, how its pool is shaped, and what the pipeline made.

    `config` is the InfraConfig; `token` tags the job's cloud resources so a retry finds them;
    `vms_refreshed_at` claims the periodic VM refresh, so two runs never refresh one job at once.
    """

    project = models.ForeignKey(
        "instances.Project", on_delete=models.CASCADE, related_name="provisioning_jobs"
    )
    account = models.ForeignKey(
        "provisioning.CloudAccount", on_delete=models.PROTECT, related_name="jobs"
    )
    name = models.CharField(max_length=40, help_text="Names the VMs: <name>-1, <name>-2, ...")
    token = models.CharField(max_length=16, default=_token, unique=True, editable=False)
    provider = models.CharField(max_length=8, default="aws")  # a key of provisioning.clouds
    region = models.CharField(max_length=32)
    pool_mode = models.CharField(max_length=8, choices=PoolMode.choices, default=PoolMode.FIXED)
    config = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.PENDING)
    phase = models.CharField(max_length=16, choices=Phase.choices, default=Phase.PROVISION)
    message = models.CharField(max_length=1000, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    vms_refreshed_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="When the periodic refresh last read the state of the job's VMs from the cloud.",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at"]), models.Index(fields=["status"])]

    def __str__(self) -> str:
        return f"{self.name} (job {self.pk})"

    @property
    def is_transitional(self) -> bool:
        return self.status in JOB_TRANSITIONAL


class JobInstance(models.Model):
    """The job whose VM an instance row stands for, written by stepRegisterSpace: a power
    operation or a details page finds the VM's job at once, not by reading every job's config.
    The VM's own record stays in the job's config."""

    instance = models.OneToOneField(
        "instances.Instance", on_delete=models.CASCADE, related_name="job_link"
    )
    job = models.ForeignKey(ProvisioningJob, on_delete=models.CASCADE, related_name="instances")

    def __str__(self) -> str:
        return f"instance {self.instance_id} of job {self.job_id}"


class JobStep(models.Model):
    """One pipeline step of a job, by the seed's name (stepCreateNetwork, ...).

    A worker claims it with a conditional UPDATE (pending → running, or running with a lapsed
    lease → running) so two workers never run it at once; `attempts` counts every try.
    """

    job = models.ForeignKey(ProvisioningJob, on_delete=models.CASCADE, related_name="steps")
    position = models.PositiveSmallIntegerField()
    phase = models.CharField(max_length=16, choices=Phase.choices, default=Phase.PROVISION)
    name = models.CharField(max_length=40)
    status = models.CharField(max_length=12, choices=StepStatus.choices, default=StepStatus.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    message = models.CharField(max_length=1000, blank=True, help_text="Shown to the user.")
    log = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["job", "position"]
        constraints = [
            models.UniqueConstraint(fields=["job", "position"], name="one_step_per_position")
        ]

    def __str__(self) -> str:
        return f"{self.name} of job {self.job_id}"

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None
