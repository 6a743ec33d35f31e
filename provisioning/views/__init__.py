"""Pages: the jobs list, the wizard, the review with its cost, live progress, cloud accounts."""

from provisioning.views.accounts import account_list, account_test
from provisioning.views.jobs import job_action, job_detail, job_list, job_progress
from provisioning.views.wizard import wizard

__all__ = [
    "account_list",
    "account_test",
    "job_action",
    "job_detail",
    "job_list",
    "job_progress",
    "wizard",
]
