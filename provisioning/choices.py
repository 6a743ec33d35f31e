"""Choice sets of the provisioning app."""

from django.db import models

from instances.choices import COLOURS


class PoolMode(models.TextChoices):
    """Fixed: N instances made directly. ASG: an auto scaling group (a MIG on GCP)."""

    FIXED = "Fixed", "Fixed"
    ASG = "ASG", "ASG"


class BootstrapMode(models.TextChoices):
    """What the cloud-init user data installs; both end by writing the readiness sentinel."""

    DEFAULT = "default", "Docker + NGINX on nginx-on-zop-net"
    BARE_METAL = "bare-metal", "Bare metal (Docker and the network, no NGINX)"


class NetworkMode(models.TextChoices):
    NEW = "new", "New VPC (private subnet, NAT egress)"
    EXISTING = "existing", "Existing VPC and subnet"


class Phase(models.TextChoices):
    """What a group of steps does to the job's environment."""

    PROVISION = "provision", "Provision"
    ATTACH_LB = "attach_lb", "Attach load balancer"
    DETACH_LB = "detach_lb", "Detach load balancer"
    HEALTH_CHECK = "health_check", "Change health check"
    TEARDOWN = "teardown", "Teardown"


class JobStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    PROVISIONING = "provisioning", "Provisioning"
    UPDATING = "updating", "Updating"
    TEARING_DOWN = "tearing_down", "Tearing down"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    DELETED = "deleted", "Deleted"


JOB_TRANSITIONAL = frozenset(
    {JobStatus.PENDING, JobStatus.PROVISIONING, JobStatus.UPDATING, JobStatus.TEARING_DOWN}
)
JOB_TERMINAL = frozenset(
    {JobStatus.READY, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.DELETED}
)
COLOURS[JobStatus] = {
    JobStatus.PENDING: "orange",
    JobStatus.PROVISIONING: "orange",
    JobStatus.UPDATING: "orange",
    JobStatus.TEARING_DOWN: "orange",
    JobStatus.READY: "green",
    JobStatus.FAILED: "red",
    JobStatus.CANCELLED: "grey",
    JobStatus.DELETED: "grey",
}
# The status a job has while the steps of a phase run.
RUNNING_STATUS = {
    Phase.PROVISION: JobStatus.PROVISIONING,
    Phase.ATTACH_LB: JobStatus.UPDATING,
    Phase.DETACH_LB: JobStatus.UPDATING,
    Phase.HEALTH_CHECK: JobStatus.UPDATING,
    Phase.TEARDOWN: JobStatus.TEARING_DOWN,
}
# ... and once they have all succeeded.
DONE_STATUS = {
    Phase.PROVISION: JobStatus.READY,
    Phase.ATTACH_LB: JobStatus.READY,
    Phase.DETACH_LB: JobStatus.READY,
    Phase.HEALTH_CHECK: JobStatus.READY,
    Phase.TEARDOWN: JobStatus.DELETED,
}


class StepStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


STEP_TRANSITIONAL = frozenset({StepStatus.PENDING, StepStatus.RUNNING})
STEP_TERMINAL = frozenset({StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.CANCELLED})
COLOURS[StepStatus] = {
    StepStatus.PENDING: "grey",
    StepStatus.RUNNING: "orange",
    StepStatus.SUCCEEDED: "green",
    StepStatus.FAILED: "red",
    StepStatus.CANCELLED: "grey",
}


class VmState(models.TextChoices):
    """Per-VM lifecycle state, kept in the job's InfraConfig (no table of its own)."""

    LAUNCHING = "launching", "Launching"
    BOOTSTRAPPING = "bootstrapping", "Bootstrapping"
    READY = "ready", "Ready"
    STOPPED = "stopped", "Stopped"
    TERMINATED = "terminated", "Terminated"
