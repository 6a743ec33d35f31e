"""The GCP pipeline through the real google-cloud-compute SDK against the local Compute Engine
fake: what lands, what a retry finds, what teardown leaves, and the cloud's own refusals."""

import json

import pytest
from django.core.exceptions import ValidationError
from google.cloud import compute_v1

from instances.models import Instance
from provisioning.choices import JobStatus, StepStatus
from provisioning.infra import InfraConfig
from provisioning.pipeline import job_run_inline
from provisioning.services.accounts import account_check, account_create
from provisioning.services.jobs import job_retry, job_teardown
from tests.fakes.gce import service_account_key
from tests.provisioning.gcp import compute

pytestmark = pytest.mark.django_db

SEVEN = [
    "stepValidate", "stepCreateNetwork", "stepCreateIAM", "stepCreateLaunchTemplate",
    "stepCreateVMs", "stepRegisterSpace", "stepFinalize",
]  # fmt: skip
TEARDOWN = [
    "stepDetachLoadBalancer", "stepTerminateVMs", "stepDeleteLaunchTemplate",
    "stepDeleteSecurityGroup", "stepDeleteIAM", "stepDeleteNetwork",
]  # fmt: skip


def steps_of(job, phase="provision"):
    return list(job.steps.filter(phase=phase).values_list("name", "status"))


def ours(gcp, job):
    """The fake's resources whose names carry the job's token, by collection."""
    state = gcp.state()
    found = {
        collection: sorted(name for name in items if job.token in name)
        for collection, items in state.items()
        if isinstance(items, dict) and collection not in ("config", "operations")
    }
    found["serviceAccounts"] = sorted(
        email for email in state["serviceAccounts"] if job.token in email
    )
    return {collection: names for collection, names in found.items() if names}


def test_a_fixed_gcp_job_runs_seven_steps_to_ready_with_private_vms(gcp, make_gcp_job, project):
    job = job_run_inline(make_gcp_job(instance_count=2).pk)
    assert job.status == JobStatus.READY, job.message
    assert steps_of(job) == [(name, StepStatus.SUCCEEDED) for name in SEVEN]
    prefix = f"zopday-web-{job.token}"
    assert ours(gcp, job) == {
        "networks": [f"{prefix}-net"],
        "subnetworks": [f"{prefix}-subnet"],
        "routers": [f"{prefix}-router"],
        "firewalls": [f"{prefix}-deny-in", f"{prefix}-iap-ssh"],
        "instanceTemplates": [f"{prefix}-tpl"],
        "instances": [f"{prefix}-vm-1", f"{prefix}-vm-2"],
        "serviceAccounts": [f"zopday-{job.token}@zopday-sandbox.iam.gserviceaccount.com"],
    }
    state = gcp.state()
    assert state["subnetworks"][f"{prefix}-subnet"]["ipCidrRange"] == "10.42.0.0/24"
    assert state["subnetworks"][f"{prefix}-subnet"]["privateIpGoogleAccess"] is True
    [nat] = state["routers"][f"{prefix}-router"]["nats"]
    assert nat["sourceSubnetworkIpRangesToNat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"
    # No port 22 from anywhere but IAP's proxies, nothing else in at all.
    deny, iap = state["firewalls"][f"{prefix}-deny-in"], state["firewalls"][f"{prefix}-iap-ssh"]
    assert (deny["sourceRanges"], deny["denied"], deny["priority"]) == (
        ["0.0.0.0/0"], [{"IPProtocol": "all"}], 1000,
    )  # fmt: skip
    assert (iap["sourceRanges"], iap["allowed"]) == (
        ["35.235.240.0/20"], [{"IPProtocol": "tcp", "ports": ["22"]}],
    )  # fmt: skip
    for instance in state["instances"].values():
        [interface] = instance["networkInterfaces"]
        assert "accessConfigs" not in interface, "a VM got a public address"
        assert interface["networkIP"].startswith("10.42.0.")
        metadata = {item["key"]: item["value"] for item in instance["metadata"]["items"]}
        assert "ssh-keys" not in metadata
        assert metadata["enable-oslogin"] == metadata["block-project-ssh-keys"] == "TRUE"
        assert metadata["user-data"].startswith("#cloud-config")
        assert "guest-attributes/zopday/bootstrap" in metadata["user-data"]
        assert instance["labels"]["zopday-token"] == job.token
        assert instance["serviceAccounts"][0]["email"].startswith(f"zopday-{job.token}@")
        assert instance["status"] == "RUNNING"
    # The two VMs are spread over the region's zones.
    zones = {instance["zone"].rsplit("/", 1)[1] for instance in state["instances"].values()}
    assert zones == {"us-central1-a", "us-central1-b"}
    config = InfraConfig.from_json(job.config)
    assert [vm.state for vm in config.vms] == ["ready", "ready"]
    rows = Instance.objects.filter(project=project, backend="gcp").order_by("name")
    assert [(i.name, i.power_state, i.vcpus, i.memory_gb) for i in rows] == [
        ("web-1", "running", 2, 2), ("web-2", "running", 2, 2),
    ]  # fmt: skip


def test_a_mig_job_lands_its_group_with_an_autoscaler_between_min_and_max(gcp, make_gcp_job):
    job = job_run_inline(make_gcp_job(pool_mode="ASG", asg_min=1, asg_max=4, asg_desired=2).pk)
    assert job.status == JobStatus.READY, job.message
    state = gcp.state()
    prefix = f"zopday-web-{job.token}"
    group = state["instanceGroupManagers"][f"{prefix}-mig"]
    assert group["targetSize"] == 2
    assert group["instanceTemplate"].endswith(f"/global/instanceTemplates/{prefix}-tpl")
    policy = state["autoscalers"][f"{prefix}-scaler"]["autoscalingPolicy"]
    assert (policy["minNumReplicas"], policy["maxNumReplicas"]) == (1, 4)
    config = InfraConfig.from_json(job.config)
    assert len(config.vms) == 2 and all(vm.state == "ready" for vm in config.vms)
    assert all(vm.instance_id.startswith(f"{prefix}-vm-") for vm in config.vms)

    torn = job_run_inline(job_teardown(job=job, actor=job.created_by).pk)
    assert torn.status == JobStatus.DELETED, torn.message
    assert ours(gcp, job) == {}


def test_teardown_deletes_everything_the_job_made_in_the_seeds_order(
    gcp, make_gcp_job, project, owner
):
    job = job_run_inline(make_gcp_job(instance_count=1).pk)
    assert job.status == JobStatus.READY, job.message
    torn = job_run_inline(job_teardown(job=job, actor=owner).pk)
    assert torn.status == JobStatus.DELETED, torn.message
    assert steps_of(torn, "teardown") == [(name, StepStatus.SUCCEEDED) for name in TEARDOWN]
    assert ours(gcp, job) == {}
    assert not Instance.objects.filter(project=project, backend="gcp").exists()


def test_an_existing_network_is_used_and_never_touched(gcp, make_gcp_job, owner):
    networks = compute(gcp, compute_v1.NetworksClient)
    networks.insert(
        project="zopday-sandbox",
        network_resource=compute_v1.Network(name="prod-net", auto_create_subnetworks=False),
    )
    compute(gcp, compute_v1.SubnetworksClient).insert(
        project="zopday-sandbox", region="us-central1",
        subnetwork_resource=compute_v1.Subnetwork(
            name="prod-subnet", ip_cidr_range="10.8.0.0/24",
            network="projects/zopday-sandbox/global/networks/prod-net",
        ),
    )  # fmt: skip
    job = job_run_inline(
        make_gcp_job(network_mode="existing", existing_vpc_id="prod-net",
                     existing_subnet_id="prod-subnet").pk
    )  # fmt: skip
    assert job.status == JobStatus.READY, job.message
    [instance] = [i for name, i in gcp.state()["instances"].items() if job.token in name]
    assert instance["networkInterfaces"][0]["networkIP"].startswith("10.8.0.")
    assert "networks" not in ours(gcp, job)

    torn = job_run_inline(job_teardown(job=job, actor=owner).pk)
    assert torn.status == JobStatus.DELETED, torn.message
    assert (
        "The existing network was left untouched."
        in torn.steps.get(name="stepDeleteNetwork").message
    )
    state = gcp.state()
    assert "prod-net" in state["networks"] and "prod-subnet" in state["subnetworks"]


def test_an_existing_subnetwork_of_another_network_is_refused_at_validate(gcp, make_gcp_job):
    for name, cidr in (("a-net", "10.1.0.0/24"), ("b-net", "10.2.0.0/24")):
        compute(gcp, compute_v1.NetworksClient).insert(
            project="zopday-sandbox",
            network_resource=compute_v1.Network(name=name, auto_create_subnetworks=False),
        )
        compute(gcp, compute_v1.SubnetworksClient).insert(
            project="zopday-sandbox", region="us-central1",
            subnetwork_resource=compute_v1.Subnetwork(
                name=f"{name}-sub", ip_cidr_range=cidr,
                network=f"projects/zopday-sandbox/global/networks/{name}",
            ),
        )  # fmt: skip
    job = job_run_inline(
        make_gcp_job(network_mode="existing", existing_vpc_id="a-net",
                     existing_subnet_id="b-net-sub").pk
    )  # fmt: skip
    assert job.status == JobStatus.FAILED
    assert job.steps.get(name="stepValidate").message == (
        "The subnetwork b-net-sub is in the network b-net, not in a-net."
    )


def test_a_quota_refusal_stops_the_step_and_a_retry_completes_without_duplicates(
    gcp, make_gcp_job, owner
):
    gcp.configure(instance_quota=1)
    job = job_run_inline(make_gcp_job(instance_count=3).pk)
    assert job.status == JobStatus.FAILED
    step = job.steps.get(name="stepCreateVMs")
    assert step.status == StepStatus.FAILED and step.attempts == 1  # not retryable
    assert "Quota 'INSTANCES' exceeded" in step.message
    assert len(ours(gcp, job)["instances"]) == 1

    gcp.configure(instance_quota=24)
    job = job_run_inline(job_retry(job=job, actor=owner).pk)
    assert job.status == JobStatus.READY, job.message
    assert len(ours(gcp, job)["instances"]) == 3
    assert len(InfraConfig.from_json(job.config).vms) == 3


def test_a_bootstrap_that_never_finishes_fails_with_what_to_read(gcp, make_gcp_job, settings):
    settings.ZOPDAY_PROVISIONING_READY_TIMEOUT = 1
    gcp.configure(bootstrap_fails=True)
    job = job_run_inline(make_gcp_job().pk)
    assert job.status == JobStatus.FAILED
    message = job.steps.get(name="stepCreateVMs").message
    assert "waiting for the bootstrap sentinel /var/lib/zopday/bootstrap-complete" in message
    assert "/var/log/cloud-init-output.log" in message
    config = InfraConfig.from_json(job.config)
    assert [vm.state for vm in config.vms] == ["bootstrapping"]


def test_an_unknown_region_fails_validate_with_gces_answer(gcp, make_gcp_job):
    job = job_run_inline(make_gcp_job(region="mars-north1").pk)
    assert job.status == JobStatus.FAILED
    assert job.steps.get(name="stepValidate").message == (
        "The region mars-north1 does not exist in GCP."
    )


def test_the_vms_go_only_to_zones_that_offer_the_machine_type(gcp, make_gcp_job):
    # the fake offers c3-standard-4 in us-central1-a, -b and -c, not in -f
    job = job_run_inline(make_gcp_job(instance_type="c3-standard-4", instance_count=4).pk)
    assert job.status == JobStatus.READY, job.message
    lines = [entry["line"] for entry in job.steps.get(name="stepValidate").log]
    assert (
        "c3-standard-4 is not offered in us-central1-f: the VMs go to us-central1-a, "
        "us-central1-b, us-central1-c" in lines
    )
    zones = sorted(vm.zone for vm in InfraConfig.from_json(job.config).vms)
    assert zones == ["us-central1-a", "us-central1-a", "us-central1-b", "us-central1-c"]


def test_a_managed_group_spreads_only_over_the_zones_that_offer_the_machine_type(gcp, make_gcp_job):
    job = job_run_inline(
        make_gcp_job(instance_type="c3-standard-4", pool_mode="ASG", asg_min=4, asg_max=4,
                     asg_desired=4).pk
    )  # fmt: skip
    assert job.status == JobStatus.READY, job.message
    zones = {vm.zone for vm in InfraConfig.from_json(job.config).vms}
    assert zones == {"us-central1-a", "us-central1-b", "us-central1-c"}


def test_a_machine_type_no_zone_of_the_region_offers_fails_validate_and_makes_nothing(
    gcp, make_gcp_job
):
    job = job_run_inline(make_gcp_job(region="europe-west1", instance_type="c3-standard-4").pk)
    assert job.status == JobStatus.FAILED
    assert job.steps.get(name="stepValidate").message == (
        "The machine type c3-standard-4 is not offered in any zone of europe-west1: choose "
        "another machine type or region."
    )
    assert ours(gcp, job) == {}


def test_an_image_asked_for_is_checked_at_validate(gcp, make_gcp_job):
    job = job_run_inline(make_gcp_job(image_id="projects/debian-cloud/global/images/nope").pk)
    assert job.status == JobStatus.FAILED
    assert job.steps.get(name="stepValidate").message == (
        "The image projects/debian-cloud/global/images/nope does not exist, or this account may "
        "not use it: give another image, or none for the default."
    )
    assert ours(gcp, job) == {}
    family = "projects/debian-cloud/global/images/family/debian-12"
    job = job_run_inline(make_gcp_job("web2", image_id=family).pk)
    assert job.status == JobStatus.READY, job.message


def test_gcp_requests_are_checked_field_by_field(gcp_account, project, owner):
    from provisioning.services.jobs import job_create

    def errors(**choices):
        with pytest.raises(ValidationError) as raised:
            job_create(
                project=project, account=gcp_account, actor=owner, name="web",
                config=InfraConfig(**{"region": "us-central1", "instance_type": "e2-small",
                                      "exec_mode": "OSConfig", **choices}),
            )  # fmt: skip
        return raised.value.message_dict

    assert errors(region="us-east-1")["region"] == ["Give a region such as us-central1."]
    assert errors(instance_type="t3.micro")["instance_type"][0].startswith(
        "Choose one of: e2-micro, e2-small"
    )
    assert errors(exec_mode="SSM")["exec_mode"] == ["On GCP the exec channel is OSConfig."]
    assert errors(image_id="Debian_12")["image_id"][0].startswith(
        "Give an image name, or projects/PROJECT/global/images/NAME"
    )
    assert errors(network_mode="existing", existing_vpc_id="Prod_Net", existing_subnet_id="")[
        "existing_vpc_id"
    ] == ["Give the name of a VPC network such as prod-net."]


def test_gcp_accounts_take_a_service_account_key_and_check_their_connection(
    gcp, project, owner, settings
):
    key = service_account_key(gcp, email="ops@zopday-sandbox.iam.gserviceaccount.com")
    settings.ZOPDAY_CLOUD_ENDPOINT_ALLOWLIST = [gcp.url.removeprefix("http://")]  # the fake's

    def create(**fields):
        return account_create(
            project=project, actor=owner, name=fields.pop("name", "GCP"), provider="gcp",
            default_region=fields.pop("default_region", "us-central1"), endpoint_url=gcp.url,
            **fields,
        )  # fmt: skip

    def error(**fields):
        with pytest.raises(ValidationError) as raised:
            create(**fields)
        return raised.value.message_dict

    assert error(service_account_key="")["service_account_key"] == [
        "Paste the service account key (JSON)."
    ]
    assert error(service_account_key="{not json")["service_account_key"] == [
        "Paste the service account key as downloaded: a JSON document."
    ]
    assert error(service_account_key=json.dumps({**key, "type": "authorized_user"}))[
        "service_account_key"
    ][0].startswith("This is not a service account key")
    assert error(service_account_key=json.dumps({**key, "private_key": ""}))[
        "service_account_key"
    ] == ["The key lacks private_key: download a new key for the account."]
    assert error(service_account_key=json.dumps(key), gcp_project="X")["gcp_project"][0].startswith(
        "Give the GCP project id"
    )
    assert error(service_account_key=json.dumps(key), default_region="us-east-1")[
        "default_region"
    ] == ["Give a region such as us-central1."]

    account = create(service_account_key=json.dumps(key))
    assert (account.gcp_project, account.access_key_id) == (
        "zopday-sandbox", "ops@zopday-sandbox.iam.gserviceaccount.com",
    )  # fmt: skip
    assert key["private_key"] not in account.secret_access_key_encrypted
    checked = account_check(account=account, actor=owner)
    assert checked.last_check_ok, checked.last_check_message
    assert checked.last_check_message == (
        "Connected as ops@zopday-sandbox.iam.gserviceaccount.com (project zopday-sandbox); "
        "4 zones in us-central1."
    )
    gcp.revoke("ops@zopday-sandbox.iam.gserviceaccount.com")
    from provisioning.clouds.gcp.sdk import forget_clients

    forget_clients()
    checked = account_check(account=account, actor=owner)
    assert checked.last_check_ok is False
    assert checked.last_check_message.startswith("Google refused the service account key")


def test_a_job_that_never_got_past_validate_is_torn_down(gcp, make_gcp_job, owner):
    job = job_run_inline(make_gcp_job(region="us-central9").pk)
    assert job.status == JobStatus.FAILED
    job = job_run_inline(job_teardown(job=job, actor=owner).pk)
    assert job.status == JobStatus.DELETED, job.message


def test_a_group_that_cannot_create_its_vms_stops_with_googles_reason(gcp, make_gcp_job):
    gcp.configure(instance_quota=1)
    job = job_run_inline(make_gcp_job(pool_mode="ASG", asg_min=2, asg_max=2, asg_desired=2).pk)
    assert job.status == JobStatus.FAILED
    step = job.steps.get(name="stepCreateVMs")
    assert "cannot create its VMs: Quota 'INSTANCES' exceeded" in step.message
    assert step.attempts == 1  # a quota is not a reason to try again


def test_googles_not_yet_answers_are_retried_and_their_reason_kept():
    from google.api_core import exceptions as api_exceptions

    from provisioning.clouds.errors import CloudError
    from provisioning.clouds.gcp.sdk import mapped_errors

    for error, retryable, code in (
        (api_exceptions.Forbidden("Rate Limit Exceeded",
                                  errors=[{"reason": "rateLimitExceeded"}]), True, "rateLimitExceeded"),
        (api_exceptions.BadRequest("in use",
                                   errors=[{"reason": "resourceInUseByAnotherResource"}]), True,
         "resourceInUseByAnotherResource"),
        (api_exceptions.Forbidden("Required 'compute.networks.create' permission",
                                  errors=[{"reason": "forbidden"}]), False, "forbidden"),
    ):  # fmt: skip
        with pytest.raises(CloudError) as raised, mapped_errors():
            raise error
        assert (raised.value.retryable, raised.value.code) == (retryable, code)


def test_a_post_to_something_missing_is_an_error_not_a_silent_none(gcp_account):
    from provisioning.clouds.errors import CloudError
    from provisioning.clouds.gcp.sdk import google_api

    path = "dns/v1/projects/zopday-sandbox/managedZones/nowhere/changes"
    with pytest.raises(CloudError):
        google_api(gcp_account, "dns", "POST", path, json={"additions": []})
    assert (
        google_api(gcp_account, "dns", "GET", "dns/v1/projects/zopday-sandbox/managedZones/nowhere")
        is None
    )
