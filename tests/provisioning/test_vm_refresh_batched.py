"""The periodic VM refresh asks each cloud once per account and region, not once per job or VM:
one DescribeInstances (per 200 ids) on moto, one aggregatedList on the Compute Engine fake; and
a round where nothing changed writes no job row."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from google.cloud import compute_v1

from provisioning.choices import JobStatus
from provisioning.clouds.aws import power as aws_power
from provisioning.clouds.aws.sdk import client_for
from provisioning.infra import InfraConfig
from provisioning.models import ProvisioningJob
from provisioning.pipeline import job_run_inline
from provisioning.services.vms import jobs_refresh_vms
from tests.provisioning.gcp import compute
from tests.provisioning.moto import raw_client
from tests.provisioning.vms import vm_states, wait_for

pytestmark = pytest.mark.django_db


def landed(make, name):
    job = job_run_inline(make(name, instance_count=2).pk)
    assert job.status == JobStatus.READY, job.message
    return job


def all_due():
    ProvisioningJob.objects.update(vms_refreshed_at=None)


def ids_of(job):
    return [vm.instance_id for vm in InfraConfig.from_json(job.config).vms]


def describe_calls(account):
    """A list that grows by one at each DescribeInstances the account's cached client sends."""
    calls = []
    client_for(account, "ec2", "us-east-1").meta.events.register(
        "before-call.ec2.DescribeInstances", lambda **_: calls.append(1)
    )
    return calls


def job_writes(queries):
    return [q["sql"] for q in queries if q["sql"].startswith('UPDATE "provisioning_provisioningjob"')
            and '"config"' in q["sql"]]  # fmt: skip


def test_one_describe_call_refreshes_the_vms_of_all_jobs_of_an_account(aws, account, make_job):
    first, second = landed(make_job, "web"), landed(make_job, "api")
    calls = describe_calls(account)
    ec2 = raw_client(aws, "ec2")
    ec2.stop_instances(InstanceIds=[ids_of(first)[0], ids_of(second)[1]])
    all_due()

    assert jobs_refresh_vms() == [first.pk, second.pk]
    assert len(calls) == 1
    assert vm_states(first) == {ids_of(first)[0]: "stopped", ids_of(first)[1]: "ready"}
    assert vm_states(second) == {ids_of(second)[0]: "ready", ids_of(second)[1]: "stopped"}

    all_due()  # nothing changed since: no job row is written
    with CaptureQueriesContext(connection) as queries:
        assert jobs_refresh_vms() == [first.pk, second.pk]
    assert job_writes(queries.captured_queries) == []


def test_many_ids_are_described_in_chunks(aws, account, make_job, monkeypatch):
    first, second = landed(make_job, "web"), landed(make_job, "api")
    monkeypatch.setattr(aws_power, "ID_FILTER_VALUES", 3)
    calls = describe_calls(account)
    raw_client(aws, "ec2").terminate_instances(InstanceIds=[ids_of(second)[1]])
    all_due()

    assert jobs_refresh_vms() == [first.pk, second.pk]
    assert len(calls) == 2  # four ids, three to a call
    assert set(vm_states(first).values()) == {"ready"}
    assert vm_states(second)[ids_of(second)[1]] == "terminated"


def test_gcp_vms_of_many_jobs_are_read_with_one_aggregated_list(gcp, make_gcp_job):
    first, second = landed(make_gcp_job, "web"), landed(make_gcp_job, "api")
    gone, zone = ids_of(first)[1], InfraConfig.from_json(first.config).vms[1].zone
    compute(gcp, compute_v1.InstancesClient).delete(
        project="zopday-sandbox", zone=zone, instance=gone
    )
    wait_for(lambda: gone not in gcp.state()["instances"], "GCE to delete the VM")
    all_due()
    gcp.calls.clear()

    assert jobs_refresh_vms() == [first.pk, second.pk]
    assert gcp.calls["instances_aggregated"] == 1
    assert gcp.calls["collection_get"] == 0  # no read of a single VM
    assert vm_states(first)[gone] == "terminated"
    assert set(vm_states(second).values()) == {"ready"}
