"""A GCP job's load balancer against the Compute Engine fake: the 11-step pipeline lands a
global external Application Load Balancer and its DNS record; its health reaches the VMs' page;
the check can be moved; detach, attach again and teardown leave nothing behind."""

import json

import pytest
from google.auth.transport.requests import AuthorizedSession
from google.oauth2 import service_account

from provisioning.choices import JobStatus, StepStatus
from provisioning.infra import InfraConfig
from provisioning.pipeline import job_run_inline
from provisioning.services.jobs import job_health_check_set, job_teardown, job_vm_op
from provisioning.services.vms import job_vms_refresh
from tests.fakes.gce import service_account_key

pytestmark = pytest.mark.django_db

ELEVEN = [
    "stepValidate", "stepCreateNetwork", "stepCreateIAM", "stepCreateLaunchTemplate",
    "stepCreateVMs", "stepCreateLoadBalancer", "stepCreateTargetGroup", "stepCreateListener",
    "stepCreateDNSRecord", "stepRegisterSpace", "stepFinalize",
]  # fmt: skip
LB_COLLECTIONS = (
    "addresses", "healthChecks", "backendServices", "urlMaps", "targetHttpProxies",
    "forwardingRules", "instanceGroups",
)  # fmt: skip


def lb_resources(gcp, job):
    state = gcp.state()
    return {
        collection: sorted(name for name in state.get(collection, {}) if job.token in name)
        for collection in LB_COLLECTIONS
        if any(job.token in name for name in state.get(collection, {}))
    }


def dns(gcp):
    """Cloud DNS of the fake, as a user of the project sees it."""
    key = service_account_key(gcp, email="dns-admin@zopday-sandbox.iam.gserviceaccount.com")
    credentials = service_account.Credentials.from_service_account_info(
        key, scopes=["https://www.googleapis.com/auth/cloud-platform"]
    )
    session = AuthorizedSession(credentials)
    base = f"{gcp.url}/dns/v1/projects/zopday-sandbox"
    return session, base


def lb_health(job):
    job.refresh_from_db()
    return [(vm.lb_health, vm.lb_health_reason) for vm in InfraConfig.from_json(job.config).vms]


@pytest.fixture
def landed(gcp, make_gcp_job):
    job = job_run_inline(
        make_gcp_job(instance_count=2, load_balancer=True, dns_name="shop.example.com").pk
    )
    assert job.status == JobStatus.READY, job.message
    return job


def test_a_fixed_job_with_a_load_balancer_runs_eleven_steps(gcp, landed):
    job = landed
    assert list(job.steps.values_list("name", "status")) == [
        (name, StepStatus.SUCCEEDED) for name in ELEVEN
    ]
    prefix = f"zopday-web-{job.token}"
    assert lb_resources(gcp, job) == {
        "addresses": [f"{prefix}-lb-ip"],
        "healthChecks": [f"{prefix}-hc"],
        "backendServices": [f"{prefix}-bes"],
        "urlMaps": [f"{prefix}-urlmap"],
        "targetHttpProxies": [f"{prefix}-proxy"],
        "forwardingRules": [f"{prefix}-fr"],
        "instanceGroups": [f"{prefix}-ig-a", f"{prefix}-ig-b"],  # one per zone of the pool
    }
    state = gcp.state()
    address = state["addresses"][f"{prefix}-lb-ip"]["address"]
    rule = state["forwardingRules"][f"{prefix}-fr"]
    assert (rule["IPAddress"], rule["portRange"].split("-")[0]) == (address, "80")
    check = state["healthChecks"][f"{prefix}-hc"]["httpHealthCheck"]
    assert (check["port"], check["requestPath"]) == (80, "/healthz")
    service = state["backendServices"][f"{prefix}-bes"]
    assert (service["loadBalancingScheme"], service["portName"]) == ("EXTERNAL_MANAGED", "http")
    assert len(service["backends"]) == 2
    lb_in = state["firewalls"][f"{prefix}-lb-in"]
    assert lb_in["sourceRanges"] == ["130.211.0.0/22", "35.191.0.0/16"]
    assert lb_in["allowed"] == [{"IPProtocol": "tcp", "ports": ["80"]}]
    [zone] = [z for z in state["managedZones"].values() if z["dnsName"] == "example.com."]
    assert zone["name"] == f"zopday-{job.token}-zone"
    [record] = [r for r in zone["rrsets"] if r["type"] == "A"]
    assert (record["name"], record["rrdatas"]) == ("shop.example.com.", [address])
    assert job.config["space"]["load_balancer"] == address

    # The periodic refresh reads what the load balancer says of each VM.
    job_vms_refresh(job=job)
    assert lb_health(job) == [("healthy", ""), ("healthy", "")]


def test_moving_the_health_check_patches_it_and_opens_the_port(gcp, landed, owner):
    job_health_check_set(job=landed, actor=owner, path="/up", port=8080)
    job = job_run_inline(landed.pk)
    assert job.status == JobStatus.READY, job.message
    prefix = f"zopday-web-{job.token}"
    state = gcp.state()
    check = state["healthChecks"][f"{prefix}-hc"]["httpHealthCheck"]
    assert (check["port"], check["requestPath"]) == (8080, "/up")
    assert state["firewalls"][f"{prefix}-lb-in"]["allowed"] == [
        {"IPProtocol": "tcp", "ports": ["80", "8080"]}
    ]
    # The VMs serve on 80 only: the load balancer now finds them unhealthy, and says why.
    job_vms_refresh(job=job)
    reason = "the health check GET /up on port 8080 fails"
    assert lb_health(job) == [("unhealthy", reason), ("unhealthy", reason)]


def test_detach_then_attach_again_then_teardown_leaves_nothing(gcp, landed, owner):
    job = job_run_inline(job_vm_op(job=landed, actor=owner, op="detach_lb").pk)
    assert job.status == JobStatus.READY, job.message
    assert lb_resources(gcp, job) == {}
    assert not any(job.token in name for name in gcp.state()["managedZones"])
    assert len([n for n in gcp.state()["instances"] if job.token in n]) == 2

    job = job_run_inline(job_vm_op(job=job, actor=owner, op="attach_lb").pk)
    assert job.status == JobStatus.READY, job.message
    assert set(lb_resources(gcp, job)) == set(LB_COLLECTIONS)

    job = job_run_inline(job_teardown(job=job, actor=owner).pk)
    assert job.status == JobStatus.DELETED, job.message
    state = gcp.state()
    leftovers = {
        collection: [name for name in items if job.token in name]
        for collection, items in state.items()
        if isinstance(items, dict) and collection not in ("config", "operations")
    }
    assert {k: v for k, v in leftovers.items() if v} == {}


def test_a_mig_job_balances_over_the_groups_own_instance_group(gcp, make_gcp_job, owner):
    job = job_run_inline(
        make_gcp_job(pool_mode="ASG", asg_min=2, asg_max=2, asg_desired=2,
                     load_balancer=True).pk
    )  # fmt: skip
    assert job.status == JobStatus.READY, job.message
    state = gcp.state()
    prefix = f"zopday-web-{job.token}"
    [backend] = state["backendServices"][f"{prefix}-bes"]["backends"]
    assert backend["group"].endswith(f"/regions/us-central1/instanceGroups/{prefix}-mig")
    job_vms_refresh(job=job)
    assert lb_health(job) == [("healthy", ""), ("healthy", "")]
    job = job_run_inline(job_teardown(job=job, actor=owner).pk)
    assert job.status == JobStatus.DELETED, job.message
    assert lb_resources(gcp, job) == {}


def test_a_record_in_the_users_own_zone_is_removed_but_the_zone_stays(gcp, make_gcp_job, owner):
    session, base = dns(gcp)
    created = session.post(
        f"{base}/managedZones",
        data=json.dumps(
            {
                "name": "corp",
                "dnsName": "corp.example.",
                "visibility": "public",
                "description": "the company's zone",
            }
        ),
        headers={"Content-Type": "application/json"},
    )
    assert created.status_code == 200, created.text
    job = job_run_inline(make_gcp_job(load_balancer=True, dns_name="app.corp.example").pk)
    assert job.status == JobStatus.READY, job.message
    a_records = {"name": "app.corp.example.", "type": "A"}
    records = session.get(f"{base}/managedZones/corp/rrsets", params=a_records).json()
    assert [r["name"] for r in records["rrsets"]] == ["app.corp.example."]

    job = job_run_inline(job_teardown(job=job, actor=owner).pk)
    assert job.status == JobStatus.DELETED, job.message
    assert session.get(f"{base}/managedZones/corp").status_code == 200
    records = session.get(f"{base}/managedZones/corp/rrsets", params=a_records).json()
    assert records.get("rrsets", []) == []


def test_someone_elses_record_for_the_name_is_never_replaced_or_deleted(gcp, make_gcp_job, owner):
    session, base = dns(gcp)
    zone = {"name": "corp", "dnsName": "corp.example.", "visibility": "public",
            "description": "the company's zone"}  # fmt: skip
    assert session.post(f"{base}/managedZones", json=zone).status_code == 200
    theirs = {"name": "app.corp.example.", "type": "A", "ttl": 300, "rrdatas": ["203.0.113.7"]}
    changed = session.post(f"{base}/managedZones/corp/changes", json={"additions": [theirs]})
    assert changed.status_code == 200, changed.text
    job = job_run_inline(make_gcp_job(load_balancer=True, dns_name="app.corp.example").pk)
    assert job.status == JobStatus.FAILED
    assert job.steps.get(name="stepCreateDNSRecord").message == (
        "The zone corp already has an A record for app.corp.example. pointing at 203.0.113.7: "
        "remove it, or choose another DNS name."
    )
    job = job_run_inline(job_teardown(job=job, actor=owner).pk)
    assert job.status == JobStatus.DELETED, job.message
    a_records = {"name": "app.corp.example.", "type": "A"}
    records = session.get(f"{base}/managedZones/corp/rrsets", params=a_records).json()
    assert [r["rrdatas"] for r in records["rrsets"]] == [["203.0.113.7"]]


def test_gcp_health_check_paths_are_url_paths(gcp, make_gcp_job, owner):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as raised:
        make_gcp_job(load_balancer=True, health_check_path='/up"{x}')
    assert raised.value.message_dict["health_check_path"][0].startswith(
        "The health check path is a URL path"
    )


def test_the_jobs_own_zone_is_kept_when_someone_added_records_to_it(gcp, landed, owner):
    session, base = dns(gcp)
    [zone] = [name for name in gcp.state()["managedZones"] if landed.token in name]
    theirs = {"name": "mail.example.com.", "type": "A", "ttl": 300, "rrdatas": ["203.0.113.9"]}
    added = session.post(f"{base}/managedZones/{zone}/changes", json={"additions": [theirs]})
    assert added.status_code == 200, added.text

    job = job_run_inline(job_teardown(job=landed, actor=owner).pk)
    assert job.status == JobStatus.DELETED, job.message
    step = job.steps.get(phase="teardown", name="stepDetachLoadBalancer")
    assert f"kept the DNS zone {zone}: it holds records the job did not make" in [
        entry["line"] for entry in step.log
    ]
    listed = session.get(f"{base}/managedZones/{zone}/rrsets").json()["rrsets"]
    assert [(r["name"], r["rrdatas"]) for r in listed if r["type"] == "A"] == [
        ("mail.example.com.", ["203.0.113.9"])
    ]  # theirs, and no longer the job's
