"""Provisioned VMs as instances: the aws backend against moto, the periodic refresh of their state,
and the rules that keep disks, interfaces and consoles away from them (no worker here; see
clouds/aws/test_power.py for power operations through a real one)."""

import importlib

import pytest
from django.apps import apps as django_apps
from django.utils import timezone

from instances.actions import instance_allowed_actions, instance_console_actions
from instances.backends import backend_named
from instances.backends.base import BackendError, ExitKind, Power
from instances.choices import LastExit, Outcome, PowerState, Role
from instances.errors import ActionRefused
from instances.models import AuditEvent, Instance
from instances.services import network, power, storage
from instances.services.instances import instance_create
from instances.services.queueing import host_queue
from provisioning.choices import JobStatus
from provisioning.infra import InfraConfig
from provisioning.models import CloudAccount, JobInstance, ProvisioningJob
from provisioning.pipeline import job_run_inline
from provisioning.selectors import job_vm_for_instance
from provisioning.services.vms import jobs_refresh_vms
from tests.factories import instance_request
from tests.provisioning.moto import raw_client
from tests.provisioning.proxy import SlowProxy
from tests.provisioning.vms import ec2_state, instances_of, vm_states

pytestmark = pytest.mark.django_db


@pytest.fixture
def landed(aws, make_job):
    job = job_run_inline(make_job(instance_count=2).pk)
    assert job.status == JobStatus.READY, job.message
    return job


def make_due(job):
    ProvisioningJob.objects.filter(pk=job.pk).update(vms_refreshed_at=None)


def test_registered_vms_know_their_ec2_instance_job_and_lifecycle(landed, client_for):
    config = InfraConfig.from_json(landed.config)
    first = instances_of(landed)[0]
    assert first.host == "aws:us-east-1"
    assert host_queue(first) == "celery"
    page = client_for("viewer").get(f"/projects/alpha/instances/{first.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert config.vms[0].instance_id in html
    assert 'Lifecycle state: <span class="mono">Ready</span>' in html
    assert f'href="/projects/alpha/provisioning/jobs/{landed.pk}/"' in html
    # the way in: a session the user's own AWS identity must be allowed to start
    ssm = f"aws ssm start-session --target {config.vms[0].instance_id} --region us-east-1"
    assert f'Shell (SSM, as your AWS identity): <span class="mono">{ssm}</span>' in html


def test_the_user_data_tab_of_an_aws_vm_points_at_its_job_and_shows_no_password(landed, client_for):
    first = instances_of(landed)[0]
    page = client_for("owner").get(f"/projects/alpha/instances/{first.pk}/?tab=user-data")
    html = page.content.decode()
    assert "cloud-init user data of its provisioning job" in html
    assert "Initial password" not in html


def test_the_storage_and_networking_tabs_of_an_aws_vm_say_where_those_are(landed, client_for):
    first = instances_of(landed)[0]
    storage = client_for("owner").get(f"/projects/alpha/instances/{first.pk}/?tab=storage").text
    assert "volumes are the ones its provisioning job (linked above) launched it with" in storage
    assert "<table>" not in storage and "Create and attach" not in storage
    network = client_for("owner").get(f"/projects/alpha/instances/{first.pk}/?tab=networking").text
    assert "on the network its provisioning job (linked above) built in AWS" in network
    assert "<table>" not in network


def test_the_backend_reads_and_changes_the_ec2_state(aws, landed):
    backend = backend_named("aws")
    first = instances_of(landed)[0]
    ec2_id = InfraConfig.from_json(landed.config).vms[0].instance_id
    assert backend.status(first.machine_id).power == Power.RUNNING
    backend.shutdown(first.machine_id)
    assert backend.wait_powered_off(first.machine_id, timeout=10)
    assert ec2_state(aws, ec2_id) == "stopped"
    assert backend.status(first.machine_id).exit == ExitKind.REQUESTED
    assert vm_states(landed)[ec2_id] == "stopped"
    assert backend.start(backend_spec(first))  # it was stopped: this call started it
    assert not backend.start(backend_spec(first))  # running: left alone
    assert ec2_state(aws, ec2_id) == "running"
    assert vm_states(landed)[ec2_id] == "ready"
    proxy = SlowProxy(aws, hold=b"Action=RebootInstances", seconds=0)
    CloudAccount.objects.filter(pk=landed.account_id).update(endpoint_url=proxy.url)
    try:
        backend.restart(first.machine_id)
    finally:
        CloudAccount.objects.filter(pk=landed.account_id).update(endpoint_url=aws)
        proxy.close()
    assert proxy.forwarded.is_set(), "RebootInstances never reached EC2"
    backend.force_stop(first.machine_id)
    assert ec2_state(aws, ec2_id) == "stopped"
    with pytest.raises(BackendError, match="is stopped: only a running VM can be rebooted"):
        backend.restart(first.machine_id)


def test_while_a_phase_runs_its_steps_own_the_config_and_the_refresh_catches_up(aws, landed):
    # A step saves its whole copy of the InfraConfig: a state recorded meanwhile would be lost.
    backend = backend_named("aws")
    first = instances_of(landed)[0]
    ec2_id = InfraConfig.from_json(landed.config).vms[0].instance_id
    ProvisioningJob.objects.filter(pk=landed.pk).update(status=JobStatus.UPDATING)
    backend.force_stop(first.machine_id)
    assert ec2_state(aws, ec2_id) == "stopped"
    assert vm_states(landed)[ec2_id] == "ready"
    ProvisioningJob.objects.filter(pk=landed.pk).update(status=JobStatus.READY)
    make_due(landed)
    assert jobs_refresh_vms() == [landed.pk]
    assert vm_states(landed)[ec2_id] == "stopped"


def backend_spec(instance):
    from instances.specs import machine_spec

    return machine_spec(instance)


def test_the_backend_never_revives_a_vm_terminated_outside_the_console(aws, landed):
    backend = backend_named("aws")
    first = instances_of(landed)[0]
    ec2_id = InfraConfig.from_json(landed.config).vms[0].instance_id
    raw_client(aws, "ec2").terminate_instances(InstanceIds=[ec2_id])
    with pytest.raises(BackendError, match="terminated outside the console") as caught:
        backend.shutdown(first.machine_id)
    assert not caught.value.retryable
    assert f"Delete job {landed.name}" in caught.value.message
    with pytest.raises(BackendError, match="terminated outside the console"):
        backend.start(backend_spec(first))
    assert ec2_state(aws, ec2_id) == "terminated"
    assert vm_states(landed)[ec2_id] == "terminated"
    first.refresh_from_db()
    assert "terminated outside the console" in first.start_refusal


def test_a_vm_ec2_has_forgotten_is_reported_as_gone(aws, landed):
    first = instances_of(landed)[0]
    config = InfraConfig.from_json(landed.config)
    config.vms[0].instance_id = "i-0123456789abcdef0"
    ProvisioningJob.objects.filter(pk=landed.pk).update(config=config.to_json())
    with pytest.raises(BackendError, match="EC2 has no instance i-0123456789abcdef0 in us-east-1"):
        backend_named("aws").status(first.machine_id)


def test_an_instance_reads_only_its_own_jobs_config(
    landed, make_job, monkeypatch, django_assert_num_queries
):
    for name in ("api", "db", "cache"):
        make_job(name)  # newer jobs of the project, read first by a scan
    read = []
    parse = InfraConfig.from_json
    monkeypatch.setattr(InfraConfig, "from_json", lambda data: read.append(data) or parse(data))
    first = instances_of(landed)[0]
    with django_assert_num_queries(1):
        found = job_vm_for_instance(first.pk)
    assert found is not None
    assert (found.job, found.vm.console_instance_id) == (landed, first.pk)
    assert read == [landed.config]


def test_a_job_does_not_take_over_an_instance_of_its_vms_name(
    aws, make_job, project, operator, subnet
):
    local = instance_create(
        project=project, actor=operator, request=instance_request(subnet, name="db-1")
    )
    job = make_job("web", instance_count=1)  # the name is free when the job is created
    Instance.objects.filter(pk=local.pk).update(name="web-1")  # as in the admin, say
    job = job_run_inline(job.pk)
    assert job.status == JobStatus.FAILED
    assert f"Project {project.slug} already has an instance named web-1" in job.message
    local.refresh_from_db()
    assert (local.backend, local.stop_refusal) == ("qemu", "")
    assert not JobInstance.objects.exists()


def test_an_instance_may_not_take_a_name_a_jobs_vms_will_have(make_job, project, operator, subnet):
    from django.core.exceptions import ValidationError

    make_job("web", pool_mode="ASG", asg_min=1, asg_desired=1, asg_max=2)
    for name in ("web-1", "web-2"):
        with pytest.raises(ValidationError) as refused:
            instance_create(
                project=project, actor=operator, request=instance_request(subnet, name=name)
            )
        assert refused.value.message_dict["name"] == [
            "Job web names its VMs web-1, web-2, ...: choose another name."
        ]
    assert not Instance.objects.filter(project=project).exists()
    for name in ("web-3", "web-x", "webs-1"):
        instance_create(
            project=project, actor=operator, request=instance_request(subnet, name=name)
        )


def test_group_vms_registered_before_their_refusal_get_it(aws, make_job):
    job = job_run_inline(make_job(pool_mode="ASG", asg_max=2, asg_desired=1).pk)
    Instance.objects.filter(project=job.project).update(stop_refusal="")
    migration = importlib.import_module("provisioning.migrations.0004_stop_refusal_of_group_vms")
    migration.refuse_stopping_group_vms(django_apps, None)
    [instance] = instances_of(job)
    assert instance.stop_refusal.startswith(
        f"This VM belongs to the auto scaling group of job {job.name}"
    )


def test_jobs_registered_before_the_links_get_them_from_their_configs(landed):
    instances = instances_of(landed)
    JobInstance.objects.all().delete()
    migration = importlib.import_module("provisioning.migrations.0003_job_instance")
    migration.link_registered_instances(django_apps, None)
    links = JobInstance.objects.order_by("instance__name")
    assert [(link.instance, link.job) for link in links] == [(i, landed) for i in instances]


def test_an_instance_that_is_no_vm_of_a_job_says_so(aws, landed):
    first = instances_of(landed)[0]
    config = InfraConfig.from_json(landed.config)
    for vm in config.vms:
        vm.console_instance_id = None
    ProvisioningJob.objects.filter(pk=landed.pk).update(config=config.to_json())
    with pytest.raises(BackendError, match="is not a VM of any provisioning job"):
        backend_named("aws").shutdown(first.machine_id)


def test_vms_of_an_auto_scaling_group_reboot_but_are_not_stopped(aws, make_job, owner):
    job = job_run_inline(make_job(pool_mode="ASG", asg_max=2, asg_desired=1).pk)
    assert job.status == JobStatus.READY, job.message
    [instance] = instances_of(job)
    refusal = (
        f"This VM belongs to the auto scaling group of job {job.name}: the group would replace "
        "a stopped VM. Change the group's desired capacity instead."
    )
    allowed = instance_allowed_actions(instance, Role.ADMIN)
    assert (allowed["shutdown"].reason, allowed["force_stop"].reason) == (refusal, refusal)
    assert allowed["restart"]  # the buttons say so before anyone clicks
    with pytest.raises(ActionRefused, match="auto scaling group"):
        power.instance_shutdown(instance=instance, actor=owner)
    instance.refresh_from_db()
    assert instance.power_state == PowerState.RUNNING
    backend = backend_named("aws")  # and the backend refuses too, whoever calls it
    with pytest.raises(BackendError, match="the group would replace a stopped VM"):
        backend.shutdown(instance.machine_id)
    with pytest.raises(BackendError, match="auto scaling group"):
        backend.force_stop(instance.machine_id)
    backend.restart(instance.machine_id)
    assert backend.status(instance.machine_id).power == Power.RUNNING


@pytest.mark.parametrize(
    ("call", "args"),
    [
        ("set_link", ("eth0", False)),
        ("detach_disk", ("disk-1",)),
        ("serial_log", ()),
        ("console_socket", ("serial",)),
        ("guest_exec", (["true"],)),
    ],
)
def test_disks_interfaces_and_consoles_are_not_the_backends(call, args):
    with pytest.raises(BackendError, match="of aws instances are not managed by the console"):
        getattr(backend_named("aws"), call)("i-1", *args)


def test_the_refresh_follows_vms_changed_outside_the_console(aws, landed):
    first, second = instances_of(landed)
    first_id, second_id = (vm.instance_id for vm in InfraConfig.from_json(landed.config).vms)
    ec2 = raw_client(aws, "ec2")
    ec2.stop_instances(InstanceIds=[first_id])
    ec2.terminate_instances(InstanceIds=[second_id])

    assert jobs_refresh_vms() == [landed.pk]
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.power_state, first.last_exit) == (PowerState.STOPPED, LastExit.REQUESTED)
    assert second.power_state == PowerState.FAILED
    assert "terminated outside the console" in second.power_message
    assert vm_states(landed) == {first_id: "stopped", second_id: "terminated"}
    refused = instance_allowed_actions(second, Role.ADMIN)["start"]
    assert not refused and "terminated outside the console" in refused.reason
    assert instance_allowed_actions(first, Role.ADMIN)["start"]
    events = AuditEvent.objects.filter(target_type="instance").order_by("pk")
    assert [(e.action, e.actor_name, e.outcome) for e in events] == [
        ("instance.stopped", "", Outcome.SUCCESS),
        ("instance.failed", "", Outcome.FAILURE),
    ]

    assert jobs_refresh_vms() == []  # claimed: not due again yet
    ec2.start_instances(InstanceIds=[first_id])
    make_due(landed)
    assert jobs_refresh_vms() == [landed.pk]
    first.refresh_from_db()
    assert first.power_state == PowerState.RUNNING
    assert vm_states(landed)[first_id] == "ready"
    assert AuditEvent.objects.filter(action="instance.failed").count() == 1  # no repeats


def test_the_refresh_also_follows_the_vms_of_a_job_cancelled_after_they_registered(aws, landed):
    ProvisioningJob.objects.filter(pk=landed.pk).update(status=JobStatus.CANCELLED)
    first = instances_of(landed)[0]
    raw_client(aws, "ec2").stop_instances(InstanceIds=[next(iter(vm_states(landed)))])
    assert jobs_refresh_vms() == [landed.pk]
    first.refresh_from_db()
    assert first.power_state == PowerState.STOPPED


def test_the_refresh_leaves_an_instance_in_a_power_operation_alone(aws, landed):
    first, _ = instances_of(landed)
    first_id = InfraConfig.from_json(landed.config).vms[0].instance_id
    Instance.objects.filter(pk=first.pk).update(
        power_state=PowerState.STOPPING, state_changed_at=timezone.now()
    )
    raw_client(aws, "ec2").stop_instances(InstanceIds=[first_id])
    jobs_refresh_vms()
    first.refresh_from_db()
    assert first.power_state == PowerState.STOPPING  # its task settles it
    assert vm_states(landed)[first_id] == "stopped"


def test_aws_instances_show_power_buttons_and_hide_what_the_job_owns(landed):
    first = instances_of(landed)[0]
    allowed = instance_allowed_actions(first, Role.ADMIN)
    assert {name for name, verdict in allowed.items() if verdict} == {
        "shutdown", "force_stop", "restart", "view_password",
    }  # fmt: skip
    assert allowed["configure"].reason == (
        "The disks, network interfaces and run strategy of aws instances are set by their "
        "provisioning job, not here."
    )
    assert allowed["detach_disk"].reason == allowed["configure"].reason
    assert allowed["delete"].reason.startswith("aws instances go when their provisioning job")
    consoles = instance_console_actions(first, Role.ADMIN)
    assert not consoles["console"] and not consoles["serial_log"]
    assert consoles["console"].reason == "aws gives its machines no serial console: use exec."
    assert consoles["exec_console"] and consoles["exec_console_interactive"]
    # a Session Manager session starts as the job's account: operators open it, viewers do not
    assert instance_console_actions(first, Role.OPERATOR)["exec_console"]
    viewer = instance_console_actions(first, Role.VIEWER)["exec_console"]
    assert not viewer and viewer.reason == "Needs the operator role."


def test_disk_and_interface_changes_of_an_aws_instance_are_refused(
    landed, operator, project, subnet, api_for
):
    first = instances_of(landed)[0]
    reason = "The disks, network interfaces and run strategy of aws instances are set by"
    with pytest.raises(ActionRefused, match=reason):
        network.nic_add(instance=first, actor=operator, subnet=subnet)
    disk = storage.disk_create(
        project=project, actor=operator, name="data", zone="local-1a", size_gb=1
    )
    with pytest.raises(ActionRefused, match=reason):
        storage.disk_attach(disk=disk, instance=first, actor=operator)
    api = api_for("operator")
    response = api.post(f"/projects/alpha/instances/{first.pk}/nics", {"subnet": subnet.pk})
    assert response.status_code == 409
    assert response.json()["detail"].startswith(reason)
    response = api.post(f"/projects/alpha/disks/{disk.pk}/attach", {"instance": first.pk})
    assert response.status_code == 409
    assert response.json()["detail"].startswith(reason)
    detail = api.get(f"/projects/alpha/instances/{first.pk}").json()
    assert detail["allowed_actions"]["restart"]["ok"] is True
    assert detail["allowed_actions"]["configure"]["reason"].startswith(reason)


def test_a_power_operation_waits_for_ec2_within_a_tasks_time_limit(settings):
    from provisioning.clouds.power import SETTLE_SECONDS

    assert SETTLE_SECONDS < settings.CELERY_TASK_SOFT_TIME_LIMIT


def test_a_restarted_sandbox_reads_reset_not_a_cloud_failure(aws, landed, client_for):
    from tests.provisioning import moto

    moto.reset(aws)  # what a restart of `bin/zop run` does to moto's memory
    make_due(landed)
    assert jobs_refresh_vms() == [landed.pk]
    for instance in instances_of(landed):
        instance.refresh_from_db()
        assert instance.power_state == PowerState.STOPPED  # not Failed: no cloud failed
        assert instance.start_refusal.startswith("The sandbox was reset")
        assert "terminated outside the console" not in instance.start_refusal
        assert "terminated outside" not in instance.power_message
    page = client_for("viewer").get(f"/projects/alpha/provisioning/jobs/{landed.pk}/").text
    assert "The sandbox was reset (its local moto server restarted and keeps nothing)" in page
    assert 'href="/projects/alpha/provisioning/new/">Provision again</a>' in page
    with pytest.raises(BackendError, match="The sandbox was reset"):
        backend_named("aws").start(backend_spec(instances_of(landed)[0]))


def test_a_vm_terminated_in_a_sandbox_that_kept_running_is_still_told_so(aws, landed):
    ec2_id = InfraConfig.from_json(landed.config).vms[0].instance_id
    raw_client(aws, "ec2").terminate_instances(InstanceIds=[ec2_id])
    make_due(landed)
    jobs_refresh_vms()
    first = instances_of(landed)[0]
    first.refresh_from_db()
    assert first.power_state == PowerState.FAILED
    assert "terminated outside the console" in first.start_refusal
