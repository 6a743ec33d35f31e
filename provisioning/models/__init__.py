from .accounts import CloudAccount
from .jobs import JobStep, ProvisioningJob

__all__ = ["CloudAccount", "JobStep", "ProvisioningJob"]
