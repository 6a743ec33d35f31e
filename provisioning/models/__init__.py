from .accounts import CloudAccount
from .jobs import JobInstance, JobStep, ProvisioningJob

__all__ = ["CloudAccount", "JobInstance", "JobStep", "ProvisioningJob"]
