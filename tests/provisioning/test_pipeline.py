import base64

import pytest
from django.core.exceptions import ValidationError

from instances.models import Instance
from provisioning import pipeline
from provisioning.choices import JobStatus, StepStatus
from provisioning.clouds.aws.sdk import client_for
from provisioning.clouds.context import poll_delays
from provisioning.infra import InfraConfig
from provisioning.models import JobStep, ProvisioningJob
from provisioning.pipeline import job_advance, job_run_inline
from provisioning.pipeline import writer as writer_module
from provisioning.pipeline.runner import _claim
from provisioning.pipeline.writer import FLUSH_SECONDS, StepWriter
from provisioning.services.jobs import job_cancel, job_teardown, job_vm_op
from tests.provisioning.moto import raw_client, tagged_resources

pytestmark = pytest.mark.django_db

SEVEN = [
    "stepValidate", "stepCreateNetwork", "stepCreateIAM", "stepCreateLaunchTemplate",
    "stepCreateVMs", "stepRegisterSpace", "stepFinalize",
]  # fmt: skip
LB = [
    "stepCreateLoadBalancer",
    "stepCreateTargetGroup",
    "stepCreateListener",
    "stepCreateDNSRecord",
]
ELEVEN = SEVEN[:5] + LB + SEVEN[5:]
NETWORK = {
    "vpcs": 1, "subnets": 3, "internet_gateways": 1, "elastic_ips": 1, "nat_gateways": 1,
    "route_tables": 2,
}  # fmt: skip


def steps_of(job):
    return list(job.steps.values_list("name", "status"))


def instances_of(aws, job):
    ec2 = raw_client(aws, "ec2")
    tag = [{"Name": "tag:zopday:token", "Values": [job.token]}]
    return [
        i for r in ec2.describe_instances(Filters=tag)["Reservations"] for i in r["Instances"]
        if i["State"]["Name"] != "terminated"
    ]  # fmt: skip


def test_a_fixed_job_without_lb_runs_exactly_seven_steps_to_ready(aws, make_job, project):
    job = job_run_inline(make_job(instance_count=2).pk)
    assert job.status == JobStatus.READY, job.message
    assert steps_of(job) == [(name, StepStatus.SUCCEEDED) for name in SEVEN]
    assert tagged_resources(aws, job.token) == {
        **NETWORK, "security_groups": 1, "launch_templates": 1, "instances": 2,
        "iam_roles": 1, "instance_profiles": 1,
    }  # fmt: skip
    config = InfraConfig.from_json(job.config)
    assert [vm.state for vm in config.vms] == ["ready", "ready"]
    rows = Instance.objects.filter(project=project, backend="aws").order_by("name")
    assert [(i.name, i.power_state) for i in rows] == [("web-1", "running"), ("web-2", "running")]


def test_a_fixed_job_with_lb_runs_eleven_steps(aws, make_job):
    job = job_run_inline(make_job(load_balancer=True, dns_name="app.example.com").pk)
    assert job.status == JobStatus.READY, job.message
    assert [name for name, _ in steps_of(job)] == ELEVEN
    counts = tagged_resources(aws, job.token)
    assert counts["load_balancers"] == counts["target_groups"] == counts["listeners"] == 1
    assert counts["security_groups"] == 2
    elbv2 = raw_client(aws, "elbv2")
    group = elbv2.describe_target_groups()["TargetGroups"][0]
    assert (group["HealthCheckPath"], group["HealthCheckPort"]) == ("/healthz", "80")
    health = elbv2.describe_target_health(TargetGroupArn=group["TargetGroupArn"])
    assert len(health["TargetHealthDescriptions"]) == 1
    route53 = raw_client(aws, "route53")
    zone = route53.list_hosted_zones_by_name(DNSName="example.com.")["HostedZones"][0]
    records = route53.list_resource_record_sets(HostedZoneId=zone["Id"])["ResourceRecordSets"]
    assert any(r["Name"] == "app.example.com." and r["Type"] == "A" for r in records)


def test_an_asg_job_runs_to_ready_with_the_group_at_desired(aws, make_job):
    job = job_run_inline(
        make_job(pool_mode="ASG", asg_min=1, asg_max=3, asg_desired=2, load_balancer=True).pk
    )
    assert job.status == JobStatus.READY, job.message
    assert [name for name, _ in steps_of(job)] == ELEVEN
    group = raw_client(aws, "autoscaling").describe_auto_scaling_groups()["AutoScalingGroups"][0]
    assert (group["MinSize"], group["MaxSize"], group["DesiredCapacity"]) == (1, 3, 2)
    assert len(instances_of(aws, job)) == 2
    assert group["TargetGroupARNs"]


@pytest.mark.parametrize(
    "pool", [{"instance_count": 2}, {"pool_mode": "ASG", "asg_max": 2, "asg_desired": 2}]
)
def test_vms_have_no_ssh_key_no_port_22_and_no_public_ip(aws, make_job, pool):
    job = job_run_inline(make_job(load_balancer=True, **pool).pk)
    assert job.status == JobStatus.READY, job.message
    ec2 = raw_client(aws, "ec2")
    for instance in instances_of(aws, job):
        assert "KeyName" not in instance
        assert not instance.get("PublicIpAddress")
    template = ec2.describe_launch_templates(
        Filters=[{"Name": "tag:zopday:token", "Values": [job.token]}]
    )["LaunchTemplates"][0]
    data = ec2.describe_launch_template_versions(LaunchTemplateId=template["LaunchTemplateId"])[
        "LaunchTemplateVersions"][0]["LaunchTemplateData"]  # fmt: skip
    assert "KeyName" not in data
    assert data["NetworkInterfaces"][0]["AssociatePublicIpAddress"] in (False, "false")
    user_data = base64.b64decode(data["UserData"]).decode()
    assert "ssh_authorized_keys" not in user_data and "ssh-" not in user_data
    groups = ec2.describe_security_groups(
        Filters=[{"Name": "tag:zopday:token", "Values": [job.token]}]
    )["SecurityGroups"]
    for group in groups:
        for rule in group["IpPermissions"]:
            assert not (rule.get("FromPort", 0) <= 22 <= rule.get("ToPort", -1))
            assert rule.get("IpProtocol") != "-1"
    vm_group = next(g for g in groups if "vm" in g["GroupName"])
    [rule] = vm_group["IpPermissions"]
    assert rule["FromPort"] == 80 and rule["UserIdGroupPairs"] and not rule["IpRanges"]


# What a clean Fixed + LB job reads from the cloud: its checks, never a lookup before a create.
CHECKS = [
    "GetCallerIdentity", "DescribeAvailabilityZones",  # stepValidate
    "GetParameter",  # stepValidate: the sandbox's epoch marker (written where it is missing)
    "GetParameter",  # stepValidate: the default image
    "GetCommandInvocation",  # the readiness check of stepCreateVMs asks the sentinel first
    "ListHostedZonesByName",  # the DNS name's zone may be the user's own
]  # fmt: skip  # stepRegisterSpace and stepFinalize take the VMs as the readiness check found them
SERVICES = ["ec2", "iam", "ssm", "sts", "elbv2", "route53", "autoscaling"]


def test_an_image_asked_for_is_checked_at_validate_and_its_form_at_once(aws, make_job):
    job = job_run_inline(make_job(image_id="ami-0123456789abcdef0").pk)
    assert job.status == JobStatus.FAILED
    assert job.steps.get(name="stepValidate").message == (
        "The image ami-0123456789abcdef0 does not exist in us-east-1, or this account may not "
        "use it: give another image id, or none for the default."
    )
    assert not any(tagged_resources(aws, job.token).values())
    ami = raw_client(aws, "ec2").describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    assert job_run_inline(make_job("web2", image_id=ami).pk).status == JobStatus.READY
    with pytest.raises(ValidationError) as refused:
        make_job("web3", image_id="ubuntu-24.04")
    assert refused.value.message_dict == {
        "image_id": ["Give an AMI id such as ami-0123456789abcdef0."]
    }


def test_a_first_attempt_creates_without_looking_anything_up(aws, make_job):
    job = make_job(load_balancer=True, dns_name="app.example.com")
    calls: list[str] = []

    def record(model, **kwargs):
        calls.append(model.name)

    for service in SERVICES:
        client_for(job.account, service, job.region).meta.events.register("before-call", record)
    job = job_run_inline(job.pk)
    assert job.status == JobStatus.READY, job.message
    assert set(job.steps.values_list("attempts", flat=True)) == {1}
    reads = [name for name in calls if name.startswith(("Describe", "Get", "List"))]
    assert reads == CHECKS
    assert tagged_resources(aws, job.token) == {
        **NETWORK, "security_groups": 2, "launch_templates": 1, "instances": 1, "iam_roles": 1,
        "instance_profiles": 1, "load_balancers": 1, "target_groups": 1, "listeners": 1,
        "hosted_zones": 1,
    }  # fmt: skip


def test_a_step_is_claimed_only_at_the_attempt_count_it_was_read_with(aws, make_job):
    job = make_job()
    first_reader, late_reader = (job.steps.get(position=1) for _ in range(2))
    assert _claim(first_reader) and first_reader.attempts == 1
    JobStep.objects.filter(pk=first_reader.pk).update(status=StepStatus.PENDING)  # retried
    assert not _claim(late_reader)  # it read attempts = 0: it would take the rerun for a first try
    again = job.steps.get(position=1)
    assert _claim(again) and again.attempts == 2
    assert job.steps.get(position=1).attempts == 2


def test_a_step_writes_its_log_and_config_at_its_end_not_per_line(
    aws, make_job, django_assert_max_num_queries, monkeypatch
):
    monkeypatch.setattr(writer_module, "FLUSH_SECONDS", 60)  # however slow the machine
    job = make_job()
    assert job_advance(job.pk)  # stepValidate
    # stepCreateNetwork creates 12 resources and logs them: read the job and its next steps,
    # claim, then the config and the step's log with its outcome.
    with django_assert_max_num_queries(5):
        assert job_advance(job.pk)
    step = job.steps.get(name="stepCreateNetwork")
    assert step.status == StepStatus.SUCCEEDED
    assert len(step.log) >= 9
    job.refresh_from_db()
    assert set(InfraConfig.from_json(job.config).resources) >= {"vpc", "nat_gateway"}


def test_a_waiting_step_shows_its_pending_lines_at_the_next_heartbeat(aws, make_job):
    job = make_job()
    step = job.steps.get(position=1)
    writer = StepWriter(job, step, InfraConfig.from_json(job.config))
    writer.log("launched i-1")
    step.refresh_from_db()
    assert step.log == []  # less than FLUSH_SECONDS into the step
    writer.last_flush -= FLUSH_SECONDS
    writer.heartbeat()
    step.refresh_from_db()
    assert [entry["line"] for entry in step.log] == ["launched i-1"]


def test_a_job_cancelled_while_a_step_runs_stops_after_that_step(aws, make_job, owner):
    job = make_job()
    iam = client_for(job.account, "iam", job.region)

    said = []

    def cancel(**kwargs):
        said.append(job_cancel(job=job, actor=owner).message)

    iam.meta.events.register("before-call.iam.CreateRole", cancel)
    job = job_run_inline(job.pk)
    assert job.status == JobStatus.CANCELLED
    assert said == [
        "Cancelled: stepCreateIAM finishes first; then delete the job to remove what it made."
    ]
    assert steps_of(job) == [
        ("stepValidate", StepStatus.SUCCEEDED), ("stepCreateNetwork", StepStatus.SUCCEEDED),
        ("stepCreateIAM", StepStatus.SUCCEEDED),
        *[(name, StepStatus.CANCELLED) for name in SEVEN[3:]],
    ]  # fmt: skip
    assert "launch_templates" not in tagged_resources(aws, job.token)


def test_a_job_cancelled_and_deleted_during_its_last_step_is_torn_down(aws, make_job, owner):
    job = job_run_inline(make_job(load_balancer=True).pk)
    job = job_vm_op(job=job, actor=owner, op="detach_lb")  # one step: stepDetachLoadBalancer
    elbv2 = client_for(job.account, "elbv2", job.region)

    def cancel_then_delete(**kwargs):
        elbv2.meta.events.unregister("before-call.elastic-load-balancing-v2.DeleteLoadBalancer")
        job_cancel(job=ProvisioningJob.objects.get(pk=job.pk), actor=owner)
        job_teardown(job=ProvisioningJob.objects.get(pk=job.pk), actor=owner)

    elbv2.meta.events.register(
        "before-call.elastic-load-balancing-v2.DeleteLoadBalancer", cancel_then_delete
    )
    job = job_run_inline(job.pk)
    assert job.status == JobStatus.DELETED, job.message
    assert not any(tagged_resources(aws, job.token).values())


def test_a_worker_runs_steps_back_to_back_until_its_time_slice_is_used(aws, make_job):
    job = make_job()
    # A slice used up by the first step: one step ran, the rest is left for another message.
    assert pipeline.job_advance_for(job.pk, seconds=0)
    assert list(job.steps.values_list("status", flat=True).order_by("position")[:2]) == [
        StepStatus.SUCCEEDED,
        StepStatus.PENDING,
    ]
    # A slice long enough for the rest: nothing is left to queue and the job is ready.
    assert not pipeline.job_advance_for(job.pk, seconds=60)
    job.refresh_from_db()
    assert job.status == JobStatus.READY
    assert not job.steps.exclude(status=StepStatus.SUCCEEDED).exists()


def test_a_load_balancer_attached_again_gets_a_zone_under_a_new_caller_reference(
    aws, make_job, owner
):
    # Route 53 refuses a caller reference it has seen, even for a zone deleted since.
    job = job_run_inline(make_job(load_balancer=True, dns_name="app.example.com").pk)
    route53 = raw_client(aws, "route53")
    references = []
    for again in (False, True):
        if again:
            job = job_run_inline(job_vm_op(job=job, actor=owner, op="attach_lb").pk)
        assert job.status == JobStatus.READY, job.message
        [zone] = route53.list_hosted_zones_by_name(DNSName="example.com.")["HostedZones"]
        references.append(zone["CallerReference"])
        job = job_run_inline(job_vm_op(job=job, actor=owner, op="detach_lb").pk)
        assert job.status == JobStatus.READY, job.message
        assert route53.list_hosted_zones()["HostedZones"] == []
    assert len(set(references)) == 2
    assert all(reference.startswith(f"zopday-{job.token}-zone-") for reference in references)


def test_the_jobs_own_hosted_zone_is_kept_when_someone_added_records_to_it(aws, make_job, owner):
    job = job_run_inline(make_job(load_balancer=True, dns_name="app.example.com").pk)
    assert job.status == JobStatus.READY, job.message
    route53 = raw_client(aws, "route53")
    [zone] = route53.list_hosted_zones_by_name(DNSName="example.com.")["HostedZones"]
    theirs = {"Name": "mail.example.com.", "Type": "A", "TTL": 300,
              "ResourceRecords": [{"Value": "203.0.113.9"}]}  # fmt: skip
    route53.change_resource_record_sets(
        HostedZoneId=zone["Id"],
        ChangeBatch={"Changes": [{"Action": "CREATE", "ResourceRecordSet": theirs}]},
    )
    job = job_run_inline(job_teardown(job=job, actor=owner).pk)
    assert job.status == JobStatus.DELETED, job.message
    step = job.steps.get(phase="teardown", name="stepDetachLoadBalancer")
    zone_id = zone["Id"].rsplit("/", 1)[-1]
    assert any(
        "kept the hosted zone" in entry["line"] and zone_id in entry["line"] for entry in step.log
    )
    records = route53.list_resource_record_sets(HostedZoneId=zone["Id"])["ResourceRecordSets"]
    assert [r["Name"] for r in records if r["Type"] == "A"] == ["mail.example.com."]


def test_the_task_running_steps_outlives_their_longest_waits(settings):
    from provisioning.clouds.aws.base import SETTLE_TIMEOUT
    from provisioning.tasks import advance

    longest_step = SETTLE_TIMEOUT + settings.ZOPDAY_PROVISIONING_READY_TIMEOUT
    longest_task = settings.ZOPDAY_PROVISIONING_SLICE_SECONDS + longest_step
    assert advance.soft_time_limit > longest_task
    assert advance.time_limit > advance.soft_time_limit


def test_a_rerun_of_register_space_asks_the_cloud_again(aws, make_job):
    job = job_run_inline(make_job().pk)
    assert job.status == JobStatus.READY, job.message
    step = job.steps.get(name="stepRegisterSpace")
    JobStep.objects.filter(pk=step.pk).update(status=StepStatus.PENDING)  # re-run: attempt 2
    ProvisioningJob.objects.filter(pk=job.pk).update(status=JobStatus.PROVISIONING)
    calls = []

    def count(**kwargs):
        calls.append(1)

    client = client_for(job.account, "ec2", job.region)
    client.meta.events.register("before-call.ec2.DescribeInstances", count)
    try:
        job = job_run_inline(job.pk)
    finally:
        client.meta.events.unregister("before-call.ec2.DescribeInstances", count)
    assert job.status == JobStatus.READY, job.message
    assert job.steps.get(name="stepRegisterSpace").attempts == 2
    assert calls  # a later attempt does not trust what the first one saw


def test_poll_delays_start_small_and_double_up_to_the_period():
    delays = poll_delays(0.5, first=0.05)
    assert [next(delays) for _ in range(6)] == [0.05, 0.1, 0.2, 0.4, 0.5, 0.5]
