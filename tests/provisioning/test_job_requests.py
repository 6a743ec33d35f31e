"""Requests that start a phase of a job hold its row: a double click, or the page and the API at
once, start it once."""

import pytest

from instances.errors import ActionRefused
from provisioning.choices import JobStatus, Phase, StepStatus
from provisioning.models import ProvisioningJob
from provisioning.services.jobs import job_retry, job_teardown, job_vm_op

pytestmark = pytest.mark.django_db


def stale_copies(job: ProvisioningJob, status: str) -> tuple[ProvisioningJob, ProvisioningJob]:
    ProvisioningJob.objects.filter(pk=job.pk).update(status=status)
    return ProvisioningJob.objects.get(pk=job.pk), ProvisioningJob.objects.get(pk=job.pk)


def test_a_second_delete_from_a_stale_page_is_refused(make_job, owner):
    job = make_job()
    first, second = stale_copies(job, JobStatus.READY)
    job_teardown(job=first, actor=owner)
    steps = job.steps.filter(phase=Phase.TEARDOWN).count()

    with pytest.raises(ActionRefused, match="Wait until the job settles"):
        job_teardown(job=second, actor=owner)
    assert steps > 0 and job.steps.filter(phase=Phase.TEARDOWN).count() == steps


def test_a_second_retry_from_a_stale_page_is_refused(make_job, owner):
    job = make_job()
    job.steps.filter(position=1).update(status=StepStatus.FAILED)
    first, second = stale_copies(job, JobStatus.FAILED)
    job_retry(job=first, actor=owner)

    with pytest.raises(ActionRefused, match="Only a failed job can be retried."):
        job_retry(job=second, actor=owner)
    assert ProvisioningJob.objects.get(pk=job.pk).status == JobStatus.PROVISIONING


def test_a_second_attach_lb_from_a_stale_page_is_refused(make_job, owner):
    job = make_job()
    first, second = stale_copies(job, JobStatus.READY)
    job_vm_op(job=first, actor=owner, op="attach_lb")
    steps = job.steps.count()

    with pytest.raises(ActionRefused, match="ready job only"):
        job_vm_op(job=second, actor=owner, op="attach_lb")
    assert job.steps.count() == steps
