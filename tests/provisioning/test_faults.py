"""Faults injected at the SDK boundary with botocore's event system: a handler registered on
the provider's real client raises the ClientError AWS would send, before the request leaves."""

from datetime import timedelta

import pytest
from botocore.exceptions import ClientError
from django.utils import timezone

from provisioning.choices import JobStatus, StepStatus
from provisioning.clouds.aws.sdk import client_for
from provisioning.models import JobStep
from provisioning.pipeline import job_run_inline
from provisioning.services.jobs import job_retry, job_teardown
from tests.provisioning.moto import raw_client, tagged_resources

pytestmark = pytest.mark.django_db

# The call each step makes that the fault hits: (service, operation). Where a step creates
# several resources, the fault hits a late one, so the retry finds the earlier ones again.
STEP_CALLS = {
    "stepValidate": ("ssm", "GetParameter"),
    "stepCreateNetwork": ("ec2", "CreateNatGateway"),
    "stepCreateIAM": ("iam", "CreateInstanceProfile"),
    "stepCreateLaunchTemplate": ("ec2", "CreateLaunchTemplate"),
    "stepCreateVMs": ("ssm", "SendCommand"),
    "stepCreateLoadBalancer": ("elbv2", "CreateLoadBalancer"),
    "stepCreateTargetGroup": ("elbv2", "RegisterTargets"),
    "stepCreateListener": ("elbv2", "CreateListener"),
    "stepCreateDNSRecord": ("route53", "ChangeResourceRecordSets"),
}  # stepRegisterSpace and stepFinalize call no cloud on a clean run: the readiness check's view
# of the VMs serves them (a re-run of stepRegisterSpace asks again: see test_pipeline)
CLEAN_RUN = {
    "vpcs": 1, "subnets": 3, "internet_gateways": 1, "elastic_ips": 1, "nat_gateways": 1,
    "route_tables": 2, "security_groups": 2, "launch_templates": 1, "instances": 2,
    "iam_roles": 1, "instance_profiles": 1, "load_balancers": 1, "target_groups": 1,
    "listeners": 1, "hosted_zones": 1,
}  # fmt: skip


class Fault:
    """Raise `code` on the operation while the job's `step` is running, `times` times."""

    def __init__(self, job, step, code, message, status=400, times=1):
        self.job, self.step, self.code, self.message = job, step, code, message
        self.status, self.left = status, times

    def __call__(self, model, **kwargs):
        if self.left <= 0:
            return
        if not JobStep.objects.filter(job=self.job, name=self.step, status="running").exists():
            return
        self.left -= 1
        raise ClientError(
            {"Error": {"Code": self.code, "Message": self.message},
             "ResponseMetadata": {"HTTPStatusCode": self.status}},
            model.name,
        )  # fmt: skip


def inject(job, step, fault):
    service, operation = STEP_CALLS[step]
    client = client_for(job.account, service, job.region)
    client.meta.events.register(
        f"before-call.{client.meta.service_model.service_id.hyphenize()}.{operation}", fault
    )
    return lambda: client.meta.events.unregister(
        f"before-call.{client.meta.service_model.service_id.hyphenize()}.{operation}", fault
    )


def lb_job(make_job):
    return make_job(instance_count=2, load_balancer=True, dns_name="app.example.com")


class WorkerKilled(BaseException):
    """Stands in for SIGKILL: nothing in the runner catches it, so the step stays running under
    its lease, and what the step had not written yet is lost."""


# Where the worker dies: right after the cloud answered a create call of the step, before the
# step recorded anything about it, with the step's later resources not made yet.
KILLED_AFTER = [
    ("stepCreateNetwork", "ec2", "CreateVpc"),
    ("stepCreateNetwork", "ec2", "CreateRouteTable"),
    ("stepCreateIAM", "iam", "CreateRole"),
    ("stepCreateLaunchTemplate", "ec2", "CreateSecurityGroup"),
    ("stepCreateVMs", "ec2", "RunInstances"),
    ("stepCreateLoadBalancer", "elbv2", "CreateLoadBalancer"),
    ("stepCreateTargetGroup", "elbv2", "CreateTargetGroup"),
    ("stepCreateListener", "elbv2", "CreateListener"),
    ("stepCreateDNSRecord", "route53", "CreateHostedZone"),
]


@pytest.mark.parametrize(
    ("step", "service", "operation"), KILLED_AFTER, ids=[f"{s}-{o}" for s, _, o in KILLED_AFTER]
)
def test_a_step_run_again_after_its_worker_died_mid_step_finds_what_it_made_by_tag(
    aws, make_job, owner, step, service, operation
):
    job = lb_job(make_job)
    client = client_for(job.account, service, job.region)
    event = f"after-call.{client.meta.service_model.service_id.hyphenize()}.{operation}"
    kills: list[str] = []

    def kill(**kwargs):
        if not kills:
            kills.append(operation)
            raise WorkerKilled

    client.meta.events.register(event, kill)
    try:
        with pytest.raises(WorkerKilled):
            job_run_inline(job.pk)
    finally:
        client.meta.events.unregister(event, kill)
    died = job.steps.get(name=step)
    assert (died.status, died.attempts) == (StepStatus.RUNNING, 1)  # it ran once, without lookups
    JobStep.objects.filter(pk=died.pk).update(lease_until=timezone.now() - timedelta(seconds=1))

    job = job_run_inline(job.pk)  # another worker takes the lapsed step over: attempt 2
    assert job.status == JobStatus.READY, job.message
    assert job.steps.get(name=step).attempts == 2
    assert tagged_resources(aws, job.token) == CLEAN_RUN
    ec2 = raw_client(aws, "ec2")
    vpc = job.config["resources"]["vpc"]
    hostnames = ec2.describe_vpc_attribute(VpcId=vpc, Attribute="enableDnsHostnames")
    assert hostnames["EnableDnsHostnames"]["Value"] is True

    job_teardown(job=job, actor=owner)
    job = job_run_inline(job.pk)
    assert job.status == JobStatus.DELETED, job.message
    assert tagged_resources(aws, job.token) == {}
    zones = raw_client(aws, "route53").list_hosted_zones_by_name(DNSName="example.com.")
    assert not [z for z in zones["HostedZones"] if z["Name"] == "example.com."]


@pytest.mark.parametrize("step", list(STEP_CALLS))
def test_a_throttling_error_is_retried_and_the_step_passes(aws, make_job, step):
    job = lb_job(make_job)
    fault = Fault(job, step, "Throttling", "Rate exceeded", times=2)
    remove = inject(job, step, fault)
    try:
        job = job_run_inline(job.pk)
    finally:
        remove()
    assert job.status == JobStatus.READY, job.message
    assert fault.left == 0
    done = job.steps.get(name=step)
    assert done.status == StepStatus.SUCCEEDED and done.attempts == 3
    assert any("Rate exceeded" in entry["line"] for entry in done.log)
    assert tagged_resources(aws, job.token) == CLEAN_RUN


@pytest.mark.parametrize("step", list(STEP_CALLS))
def test_a_permanent_error_fails_the_step_and_retry_completes_without_duplicates(
    aws, make_job, owner, step
):
    job = lb_job(make_job)
    remove = inject(
        job,
        step,
        Fault(
            job,
            step,
            "UnauthorizedOperation",
            "You are not authorized to perform this operation.",
            status=403,
        ),
    )
    try:
        job = job_run_inline(job.pk)
    finally:
        remove()
    assert job.status == JobStatus.FAILED
    failed = job.steps.get(name=step)
    assert failed.status == StepStatus.FAILED and failed.attempts == 1
    assert "You are not authorized to perform this operation." in failed.message
    assert step in job.message
    assert not job.steps.filter(status=StepStatus.SUCCEEDED, position__gt=failed.position).exists()

    job_retry(job=job, actor=owner)
    job = job_run_inline(job.pk)
    assert job.status == JobStatus.READY, job.message
    assert job.steps.get(name=step).attempts == 2
    assert tagged_resources(aws, job.token) == CLEAN_RUN


@pytest.mark.parametrize("step", list(STEP_CALLS))
def test_teardown_after_a_failure_at_each_step_leaves_nothing_tagged(aws, make_job, owner, step):
    job = lb_job(make_job)
    remove = inject(job, step, Fault(job, step, "InvalidParameterValue", "Bad value."))
    try:
        job = job_run_inline(job.pk)
    finally:
        remove()
    assert job.status == JobStatus.FAILED
    job_teardown(job=job, actor=owner)
    job = job_run_inline(job.pk)
    assert job.status == JobStatus.DELETED, job.message
    assert tagged_resources(aws, job.token) == {}


def test_a_transient_error_that_persists_fails_after_the_bounded_retries(aws, make_job, settings):
    settings.ZOPDAY_PROVISIONING_RETRY_ATTEMPTS = 3
    job = make_job()
    remove = inject(
        job, "stepCreateIAM", Fault(job, "stepCreateIAM", "Throttling", "Rate exceeded", times=99)
    )
    try:
        job = job_run_inline(job.pk)
    finally:
        remove()
    failed = job.steps.get(name="stepCreateIAM")
    assert (job.status, failed.status, failed.attempts) == (JobStatus.FAILED, StepStatus.FAILED, 3)
    assert "Rate exceeded" in failed.message


def test_the_existing_vpc_is_used_and_left_untouched(aws, make_job, owner):
    ec2 = raw_client(aws, "ec2")
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24", AvailabilityZone="us-east-1a")[
        "Subnet"
    ]["SubnetId"]
    ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.2.0/24", AvailabilityZone="us-east-1b")
    job = job_run_inline(
        make_job(
            network_mode="existing",
            existing_vpc_id=vpc,
            existing_subnet_id=subnet,
            load_balancer=True,
        ).pk
    )
    assert job.status == JobStatus.READY, job.message
    assert len(job.steps.all()) == 11
    counts = tagged_resources(aws, job.token)
    assert "vpcs" not in counts and "subnets" not in counts and "nat_gateways" not in counts
    job_teardown(job=job, actor=owner)
    job = job_run_inline(job.pk)
    assert job.status == JobStatus.DELETED, job.message
    assert tagged_resources(aws, job.token) == {}
    assert ec2.describe_vpcs(VpcIds=[vpc])["Vpcs"][0]["State"] == "available"
    assert len(ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]) == 2
    assert "left untouched" in job.steps.get(name="stepDeleteNetwork").message
