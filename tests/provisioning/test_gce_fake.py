"""The Compute Engine fake answers the real google-cloud-compute SDK (REST transport) and real
service-account credentials the way Google does, on loopback only."""

import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from google.api_core import exceptions
from google.api_core.client_options import ClientOptions
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import AnonymousCredentials
from google.auth.transport.requests import AuthorizedSession, Request
from google.cloud import compute_v1
from google.oauth2 import service_account

from tests.fakes.gce import service_account_key

PROJECT = "zopday-sandbox"
REGION, ZONE = "us-central1", "us-central1-a"
EMAIL = f"zopday@{PROJECT}.iam.gserviceaccount.com"
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
DONE = compute_v1.Operation.Status.DONE
USER_DATA = """#cloud-config
runcmd:
  - curl -sf -X PUT --data ready -H 'Metadata-Flavor: Google' http://metadata.google.internal/computeMetadata/v1/instance/guest-attributes/zopday/bootstrap
"""


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch):
    """A call that slips past the fake (to compute.googleapis.com, say) fails instead of leaving."""
    resolve = socket.getaddrinfo

    def loopback(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in ("127.0.0.1", "localhost"):
            raise OSError(f"these tests stay on loopback, not {host}")
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", loopback)


@pytest.fixture(scope="module")
def key(gce_server):
    return service_account_key(gce_server, email=EMAIL)


@pytest.fixture
def credentials(key):
    return service_account.Credentials.from_service_account_info(key, scopes=[CLOUD_PLATFORM])


@pytest.fixture
def client(gce, credentials) -> Callable[[type], Any]:
    """client(compute_v1.NetworksClient) → that client, pointed at the fake."""

    def make(client_class: type) -> Any:
        return client_class(
            credentials=credentials, client_options=ClientOptions(api_endpoint=gce.url)
        )

    return make


def short(url: str) -> str:
    return url.rsplit("/", 1)[-1]


def finished(client: Callable[[type], Any], operation: Any) -> Any:
    """Poll to DONE through the operations client of the operation's scope, built with the same
    options (ExtendedOperation.result() would poll compute.googleapis.com)."""
    while operation.status != DONE:
        if operation.zone:
            operation = client(compute_v1.ZoneOperationsClient).wait(
                project=PROJECT, zone=short(operation.zone), operation=operation.name
            )
        elif operation.region:
            operation = client(compute_v1.RegionOperationsClient).wait(
                project=PROJECT, region=short(operation.region), operation=operation.name
            )
        else:
            operation = client(compute_v1.GlobalOperationsClient).wait(
                project=PROJECT, operation=operation.name
            )
    return operation


def succeeded(client: Callable[[type], Any], operation: Any) -> Any:
    operation = finished(client, operation)
    assert not operation.error.errors, operation.error
    return operation


def eventually(check: Callable[[], Any], seconds: float = 3) -> Any:
    deadline = time.monotonic() + seconds
    while not (answer := check()):
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)
    return answer


def make_network(client, name: str = "zopday-net", cidr: str = "10.20.0.0/24") -> None:
    network = compute_v1.Network(name=name, auto_create_subnetworks=False)
    succeeded(
        client, client(compute_v1.NetworksClient).insert(project=PROJECT, network_resource=network)
    )
    subnetwork = compute_v1.Subnetwork(
        name=f"{name}-{REGION}", network=f"global/networks/{name}", ip_cidr_range=cidr
    )
    succeeded(
        client,
        client(compute_v1.SubnetworksClient).insert(
            project=PROJECT, region=REGION, subnetwork_resource=subnetwork
        ),
    )


def make_template(
    client, name: str = "zopday-tpl", *, user_data: str = USER_DATA, labels: dict | None = None
) -> str:
    items = [compute_v1.Items(key="enable-guest-attributes", value="TRUE")]
    items.append(compute_v1.Items(key="user-data", value=user_data))
    properties = compute_v1.InstanceProperties(
        machine_type="e2-small",
        labels=labels or {"zopday-job": "job-1"},
        metadata=compute_v1.Metadata(items=items),
        disks=[
            compute_v1.AttachedDisk(
                boot=True,
                auto_delete=True,
                initialize_params=compute_v1.AttachedDiskInitializeParams(
                    source_image="projects/debian-cloud/global/images/family/debian-12",
                    disk_size_gb=20,
                ),
            )
        ],
        network_interfaces=[
            compute_v1.NetworkInterface(
                subnetwork=f"regions/{REGION}/subnetworks/zopday-net-{REGION}"
            )
        ],
        service_accounts=[compute_v1.ServiceAccount(email=EMAIL, scopes=[CLOUD_PLATFORM])],
    )
    template = compute_v1.InstanceTemplate(name=name, properties=properties)
    succeeded(
        client,
        client(compute_v1.InstanceTemplatesClient).insert(
            project=PROJECT, instance_template_resource=template
        ),
    )
    return f"global/instanceTemplates/{name}"


def make_instance(
    client, name: str = "vm-1", template: str = "global/instanceTemplates/zopday-tpl"
) -> Any:
    """Insert from the template; the operation answered (not yet waited for)."""
    return client(compute_v1.InstancesClient).insert(
        request=compute_v1.InsertInstanceRequest(
            project=PROJECT,
            zone=ZONE,
            instance_resource=compute_v1.Instance(name=name),
            source_instance_template=template,
        )
    )


def instance(client, name: str = "vm-1") -> compute_v1.Instance:
    return client(compute_v1.InstancesClient).get(project=PROJECT, zone=ZONE, instance=name)


def guest_attributes(client, name: str = "vm-1") -> compute_v1.GuestAttributes:
    request = compute_v1.GetGuestAttributesInstanceRequest(
        project=PROJECT, zone=ZONE, instance=name, query_path="zopday/"
    )  # query_path is not among the method's keyword arguments
    return client(compute_v1.InstancesClient).get_guest_attributes(request=request)


def bootstrap_attribute(client, name: str = "vm-1") -> str | None:
    try:
        answer = guest_attributes(client, name)
    except exceptions.NotFound:
        return None
    return {item.key: item.value for item in answer.query_value.items}.get("bootstrap")


# ---- auth -------------------------------------------------------------------------------------
def test_the_token_endpoint_issues_an_access_token_for_the_key(gce, credentials):
    credentials.refresh(Request())
    assert credentials.token.startswith("fake-")
    session = AuthorizedSession(credentials)
    assert session.get(f"{gce.url}/compute/v1/projects/{PROJECT}/regions/{REGION}").ok


def test_compute_clients_sign_their_own_jwt_which_the_fake_accepts(client):
    region = client(compute_v1.RegionsClient).get(project=PROJECT, region=REGION)
    assert region.status == "UP"
    assert [short(zone) for zone in region.zones] == [f"{REGION}-{z}" for z in "abcf"]


def test_a_call_without_a_valid_token_is_refused_with_401(gce):
    networks = f"{gce.url}/compute/v1/projects/{PROJECT}/global/networks"
    for headers in ({}, {"Authorization": "Bearer fake-made-up"}):
        answer = requests.get(networks, headers=headers, timeout=5)
        assert answer.status_code == 401
        assert answer.json()["error"]["errors"][0]["reason"] == "authError"
    # the SDK's session answers a 401 by refreshing, which anonymous credentials cannot do
    anonymous = compute_v1.NetworksClient(
        credentials=AnonymousCredentials(), client_options=ClientOptions(api_endpoint=gce.url)
    )
    with pytest.raises(auth_exceptions.InvalidOperation):
        anonymous.get(project=PROJECT, network="anything")


def test_a_revoked_key_is_refused_by_the_token_endpoint_and_the_api(gce, client, credentials):
    gce.revoke(EMAIL)
    with pytest.raises(auth_exceptions.RefreshError, match="invalid_grant"):
        credentials.refresh(Request())
    # compute clients never ask the token endpoint: their self-signed JWT is refused instead
    with pytest.raises(exceptions.Unauthorized):
        client(compute_v1.RegionsClient).get(project=PROJECT, region=REGION)


# ---- locations and images ---------------------------------------------------------------------
def test_unknown_regions_zones_and_projects_are_not_found(client):
    with pytest.raises(exceptions.NotFound, match="regions/mars-north1"):
        client(compute_v1.RegionsClient).get(project=PROJECT, region="mars-north1")
    with pytest.raises(exceptions.NotFound, match="zones/us-central1-z"):
        client(compute_v1.InstancesClient).get(project=PROJECT, zone="us-central1-z", instance="x")
    with pytest.raises(exceptions.NotFound, match="'projects/elsewhere'"):
        client(compute_v1.NetworksClient).get(project="elsewhere", network="x")
    zones = client(compute_v1.ZonesClient).list(project=PROJECT)
    assert "europe-west4-a" in {zone.name for zone in zones}


def test_debian_image_families_resolve_and_others_are_not_found(client):
    images = client(compute_v1.ImagesClient)
    image = images.get_from_family(project="debian-cloud", family="debian-12")
    assert image.name.startswith("debian-12-bookworm-") and image.status == "READY"
    assert images.get(project="debian-cloud", image=image.name).self_link == image.self_link
    with pytest.raises(exceptions.NotFound):
        images.get_from_family(project="debian-cloud", family="windows-2022")


# ---- networks ---------------------------------------------------------------------------------
def test_networks_subnetworks_routers_and_firewalls_are_made_listed_and_deleted(gce, client):
    networks, subnetworks = client(compute_v1.NetworksClient), client(compute_v1.SubnetworksClient)
    routers, firewalls = client(compute_v1.RoutersClient), client(compute_v1.FirewallsClient)
    network = "global/networks/zopday-net"

    resource = compute_v1.Network(name="zopday-net", auto_create_subnetworks=False)
    operation = networks.insert(project=PROJECT, network_resource=resource)
    assert operation.status != DONE and not operation.zone and not operation.region  # global
    succeeded(client, operation)
    resource = compute_v1.Subnetwork(
        name="zopday-sub", network=network, ip_cidr_range="10.20.0.0/24",
        private_ip_google_access=True,
    )  # fmt: skip
    operation = subnetworks.insert(project=PROJECT, region=REGION, subnetwork_resource=resource)
    assert short(operation.region) == REGION
    succeeded(client, operation)
    nat = compute_v1.RouterNat(
        name="zopday-nat", nat_ip_allocate_option="AUTO_ONLY",
        source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
    )  # fmt: skip
    resource = compute_v1.Router(name="zopday-router", network=network, nats=[nat])
    succeeded(client, routers.insert(project=PROJECT, region=REGION, router_resource=resource))
    resource = compute_v1.Firewall(
        name="zopday-ssh", network=network, source_ranges=["35.235.240.0/20"],
        allowed=[compute_v1.Allowed(I_p_protocol="tcp", ports=["22"])], target_tags=["zopday"],
    )  # fmt: skip
    succeeded(client, firewalls.insert(project=PROJECT, firewall_resource=resource))

    subnetwork = subnetworks.get(project=PROJECT, region=REGION, subnetwork="zopday-sub")
    assert subnetwork.gateway_address == "10.20.0.1" and subnetwork.private_ip_google_access
    assert subnetwork.network == networks.get(project=PROJECT, network="zopday-net").self_link
    router = routers.get(project=PROJECT, region=REGION, router="zopday-router")
    assert router.nats[0].name == "zopday-nat"
    assert [firewall.name for firewall in firewalls.list(project=PROJECT)] == ["zopday-ssh"]
    stored = gce.state()["firewalls"]["zopday-ssh"]
    assert stored["allowed"] == [{"IPProtocol": "tcp", "ports": ["22"]}]
    assert (stored["direction"], stored["priority"]) == ("INGRESS", 1000)

    succeeded(client, firewalls.delete(project=PROJECT, firewall="zopday-ssh"))
    succeeded(client, routers.delete(project=PROJECT, region=REGION, router="zopday-router"))
    succeeded(client, subnetworks.delete(project=PROJECT, region=REGION, subnetwork="zopday-sub"))
    succeeded(client, networks.delete(project=PROJECT, network="zopday-net"))
    assert list(networks.list(project=PROJECT)) == []
    with pytest.raises(exceptions.NotFound, match="global/networks/zopday-net' was not found"):
        networks.get(project=PROJECT, network="zopday-net")


def test_a_duplicate_is_a_conflict_and_a_bad_name_a_bad_request(client):
    make_network(client)
    networks = client(compute_v1.NetworksClient)
    with pytest.raises(exceptions.Conflict, match="already exists"):
        networks.insert(project=PROJECT, network_resource=compute_v1.Network(name="zopday-net"))
    with pytest.raises(exceptions.BadRequest, match="'Zopday_Net'") as refused:
        networks.insert(project=PROJECT, network_resource=compute_v1.Network(name="Zopday_Net"))
    assert refused.value.errors[0]["reason"] == "invalid"


def test_a_subnetwork_needs_an_existing_network_and_a_free_range(client):
    make_network(client)  # 10.20.0.0/24
    subnetworks = client(compute_v1.SubnetworksClient)

    def insert(name: str, cidr: str, network: str = "global/networks/zopday-net") -> Any:
        resource = compute_v1.Subnetwork(name=name, network=network, ip_cidr_range=cidr)
        return subnetworks.insert(project=PROJECT, region="us-east1", subnetwork_resource=resource)

    with pytest.raises(
        exceptions.BadRequest, match="conflicts with existing subnetwork 'zopday-net-us-central1'"
    ):
        insert("other", "10.20.0.128/25")
    with pytest.raises(exceptions.BadRequest, match="ipCidrRange"):
        insert("other", "10.30.0.0/30")
    with pytest.raises(exceptions.NotFound, match="global/networks/nowhere"):
        insert("other", "10.30.0.0/24", network="global/networks/nowhere")
    with pytest.raises(exceptions.BadRequest, match="Required field 'resource.network'"):
        insert("other", "10.30.0.0/24", network="")
    succeeded(client, insert("other", "10.30.0.0/24"))


def test_lists_honour_label_and_name_filters(client):
    make_network(client)
    template = make_template(client)
    instances = client(compute_v1.InstancesClient)
    for name, job in [("zopday-a", "job-1"), ("zopday-b", "job-2"), ("other-c", "job-1")]:
        resource = compute_v1.Instance(name=name, labels={"zopday-job": job})
        request = compute_v1.InsertInstanceRequest(
            project=PROJECT,
            zone=ZONE,
            instance_resource=resource,
            source_instance_template=template,
        )
        succeeded(client, instances.insert(request=request))

    def names(expression: str) -> list[str]:
        request = compute_v1.ListInstancesRequest(project=PROJECT, zone=ZONE, filter=expression)
        return sorted(instance.name for instance in instances.list(request=request))

    assert names('labels.zopday-job = "job-1"') == ["other-c", "zopday-a"]
    assert names("labels.zopday-job=job-2") == ["zopday-b"]
    assert names('name eq "zopday-.*"') == ["zopday-a", "zopday-b"]
    assert names("name eq zopday") == []  # the regex matches the whole name
    assert names('(labels.zopday-job = "job-1") AND (name eq "zopday-.*")') == ["zopday-a"]
    with pytest.raises(exceptions.BadRequest, match="Invalid list filter"):
        names("labels.zopday-job ~ job-1")


def test_a_network_in_use_cannot_be_deleted(client):
    make_network(client)
    networks = client(compute_v1.NetworksClient)
    operation = finished(client, networks.delete(project=PROJECT, network="zopday-net"))
    [error] = operation.error.errors
    assert error.code == "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE"
    assert "subnetworks/zopday-net-us-central1" in error.message
    assert operation.http_error_status_code == 400
    assert networks.get(project=PROJECT, network="zopday-net").name == "zopday-net"
    # ... and a subnetwork while an instance has an address in it
    make_template(client)
    succeeded(client, make_instance(client))
    subnetworks = client(compute_v1.SubnetworksClient)
    delete = subnetworks.delete(project=PROJECT, region=REGION, subnetwork="zopday-net-us-central1")
    [error] = finished(client, delete).error.errors
    assert error.code == "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE"
    assert error.message.endswith(
        f"is already being used by 'projects/{PROJECT}/zones/{ZONE}/instances/vm-1'"
    )


# ---- instances --------------------------------------------------------------------------------
def test_an_instance_from_a_template_gets_an_address_in_range_and_runs(gce, client):
    gce.configure(step_seconds=0.1)
    make_network(client)
    make_template(client)
    operation = make_instance(client)
    assert operation.status != DONE and short(operation.zone) == ZONE
    assert instance(client).status in ("PROVISIONING", "STAGING")
    succeeded(client, operation)

    vm = instance(client)
    assert vm.status == "RUNNING"
    assert vm.machine_type.endswith(f"/zones/{ZONE}/machineTypes/e2-small")
    assert vm.labels == {"zopday-job": "job-1"}
    [nic] = vm.network_interfaces
    assert nic.name == "nic0" and nic.network_i_p == "10.20.0.2" and not nic.access_configs
    succeeded(client, make_instance(client, "vm-2"))
    assert instance(client, "vm-2").network_interfaces[0].network_i_p == "10.20.0.3"
    assert gce.state()["instances"]["vm-1"]["disks"][0]["boot"] is True


def test_an_instance_with_an_existing_name_is_a_conflict(client):
    make_network(client)
    make_template(client)
    succeeded(client, make_instance(client))
    with pytest.raises(exceptions.Conflict, match=f"zones/{ZONE}/instances/vm-1"):
        make_instance(client)


def test_machine_types_are_listed_per_zone_and_an_instance_needs_one_its_zone_offers(client):
    request = compute_v1.AggregatedListMachineTypesRequest(
        project=PROJECT, filter='name = "c3-standard-4"'
    )
    listed = dict(client(compute_v1.MachineTypesClient).aggregated_list(request=request))
    offering = sorted(short(scope) for scope, found in listed.items() if found.machine_types)
    assert "us-central1-a" in offering and "us-central1-f" not in offering
    [c3] = listed["zones/us-central1-a"].machine_types
    assert (c3.name, c3.guest_cpus, c3.memory_mb) == ("c3-standard-4", 4, 16384)
    assert listed["zones/us-central1-f"].warning.code == "NO_RESULTS_ON_PAGE"

    make_network(client)
    make_template(client)
    c3_in_f = compute_v1.Instance(
        name="vm-c3", machine_type="zones/us-central1-f/machineTypes/c3-standard-4"
    )
    with pytest.raises(exceptions.BadRequest, match="does not exist in zone 'us-central1-f'"):
        client(compute_v1.InstancesClient).insert(
            request=compute_v1.InsertInstanceRequest(
                project=PROJECT, zone="us-central1-f", instance_resource=c3_in_f,
                source_instance_template="global/instanceTemplates/zopday-tpl",
            )
        )  # fmt: skip


def test_stop_start_and_reset_move_the_instance_through_its_statuses(gce, client):
    gce.configure(step_seconds=0.2)  # time to see each status on the way
    make_network(client)
    make_template(client)
    succeeded(client, make_instance(client))
    instances = client(compute_v1.InstancesClient)

    operation = instances.stop(project=PROJECT, zone=ZONE, instance="vm-1")
    assert instance(client).status == "STOPPING"
    succeeded(client, operation)
    assert instance(client).status == "TERMINATED"

    operation = instances.start(project=PROJECT, zone=ZONE, instance="vm-1")
    assert instance(client).status == "STAGING"
    succeeded(client, operation)
    assert instance(client).status == "RUNNING"

    # a start of a running instance is done at once: ExtendedOperation never polls for it
    again = instances.start(project=PROJECT, zone=ZONE, instance="vm-1")
    assert again.status == DONE and again.done() and again.result() is None

    succeeded(client, instances.reset(project=PROJECT, zone=ZONE, instance="vm-1"))
    assert instance(client).status == "RUNNING"
    assert gce.state()["instances"]["vm-1"]["resets"] == 1

    operation = instances.delete(project=PROJECT, zone=ZONE, instance="vm-1")
    assert instance(client).status == "STOPPING"
    succeeded(client, operation)
    with pytest.raises(exceptions.NotFound):
        instance(client)


def test_the_bootstrap_attribute_appears_when_the_user_data_reports_it(gce, client):
    make_network(client)
    make_template(client)
    make_template(client, "quiet-tpl", user_data="#cloud-config\n")
    succeeded(client, make_instance(client))
    succeeded(client, make_instance(client, "quiet", "global/instanceTemplates/quiet-tpl"))

    assert eventually(lambda: bootstrap_attribute(client)) == "ready"
    attributes = guest_attributes(client)
    assert attributes.query_path == "zopday/"
    items = [(item.namespace, item.key, item.value) for item in attributes.query_value.items]
    assert items == [("zopday", "bootstrap", "ready")]
    time.sleep(0.1)
    assert bootstrap_attribute(client, "quiet") is None
    with pytest.raises(exceptions.NotFound, match="of type 'Guest Attribute' was not found"):
        guest_attributes(client, "quiet")


def test_a_failing_bootstrap_never_sets_the_attribute(gce, client):
    gce.configure(bootstrap_fails=True)
    make_network(client)
    make_template(client)
    succeeded(client, make_instance(client))
    time.sleep(0.2)
    assert bootstrap_attribute(client) is None
    assert instance(client).status == "RUNNING"


def test_an_instance_over_the_quota_fails_its_operation(gce, client):
    gce.configure(instance_quota=1)
    make_network(client)
    make_template(client)
    succeeded(client, make_instance(client))
    operation = finished(client, make_instance(client, "vm-2"))
    [error] = operation.error.errors
    assert error.code == "QUOTA_EXCEEDED"
    assert error.message == "Quota 'INSTANCES' exceeded. Limit: 1 in region us-central1."
    assert operation.http_error_status_code == 403
    assert set(gce.state()["instances"]) == {"vm-1"}


# ---- managed instance groups ------------------------------------------------------------------
MIG = {"project": PROJECT, "region": REGION, "instance_group_manager": "zopday-mig"}


def make_group(client, size: int, base_name: str = "zopday-job-1") -> Any:
    """A regional MIG of the template made by make_template; its client."""
    groups = client(compute_v1.RegionInstanceGroupManagersClient)
    group = compute_v1.InstanceGroupManager(
        name="zopday-mig", base_instance_name=base_name, target_size=size,
        instance_template="global/instanceTemplates/zopday-tpl",
    )  # fmt: skip
    insert = groups.insert(project=PROJECT, region=REGION, instance_group_manager_resource=group)
    succeeded(client, insert)
    return groups


def test_a_managed_instance_group_creates_resizes_and_deletes_its_instances(gce, client):
    make_network(client)
    make_template(client)
    groups = make_group(client, 3)

    eventually(lambda: groups.get(**MIG).status.is_stable)
    members = list(groups.list_managed_instances(**MIG))
    assert {(m.current_action, m.instance_status) for m in members} == {("NONE", "RUNNING")}
    names = {short(member.instance) for member in members}
    assert all(re.fullmatch(r"zopday-job-1-[a-z0-9]{4}", name) for name in names)
    made = gce.state()["instances"]
    assert len({made[name]["zone"] for name in names}) == 3  # spread over the region's zones
    assert {made[name]["labels"]["zopday-job"] for name in names} == {"job-1"}
    assert eventually(
        lambda: all(gce.state()["instances"][name]["guestAttributes"] for name in names)
    )

    templates = client(compute_v1.InstanceTemplatesClient)
    refused = finished(client, templates.delete(project=PROJECT, instance_template="zopday-tpl"))
    assert refused.error.errors[0].code == "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE"

    gce.configure(step_seconds=0.2)  # time to see the group shrinking
    resize = groups.resize(**MIG, size=1)
    actions = [member.current_action for member in groups.list_managed_instances(**MIG)]
    assert sorted(actions) == ["DELETING", "DELETING", "NONE"]
    assert groups.get(**MIG).current_actions.deleting == 2
    succeeded(client, resize)
    eventually(lambda: len(list(groups.list_managed_instances(**MIG))) == 1)
    assert groups.get(**MIG).target_size == 1

    succeeded(client, groups.delete(**MIG))
    assert gce.state()["instances"] == {} and gce.state()["instanceGroupManagers"] == {}


def test_a_group_instance_over_the_quota_stays_creating_with_the_error(gce, client):
    gce.configure(instance_quota=1)
    make_network(client)
    make_template(client)
    groups = make_group(client, 2)
    [failed] = [m for m in groups.list_managed_instances(**MIG) if m.last_attempt.errors.errors]
    assert failed.current_action == "CREATING"
    assert failed.last_attempt.errors.errors[0].code == "QUOTA_EXCEEDED"
    time.sleep(0.1)
    assert not groups.get(**MIG).status.is_stable


def test_an_autoscaler_keeps_its_target_and_policy(client):
    make_network(client)
    make_template(client)
    make_group(client, 0)
    autoscalers = client(compute_v1.RegionAutoscalersClient)
    autoscaler = compute_v1.Autoscaler(
        name="zopday-as",
        target=f"regions/{REGION}/instanceGroupManagers/zopday-mig",
        autoscaling_policy=compute_v1.AutoscalingPolicy(min_num_replicas=1, max_num_replicas=4),
    )
    insert = autoscalers.insert(project=PROJECT, region=REGION, autoscaler_resource=autoscaler)
    succeeded(client, insert)
    stored = autoscalers.get(project=PROJECT, region=REGION, autoscaler="zopday-as")
    assert stored.target.endswith("/instanceGroupManagers/zopday-mig")
    assert stored.autoscaling_policy.max_num_replicas == 4
    succeeded(client, autoscalers.delete(project=PROJECT, region=REGION, autoscaler="zopday-as"))


# ---- load balancing ---------------------------------------------------------------------------
GROUP = f"zones/{ZONE}/instanceGroups/zopday-ig"
SERVICE = {"project": PROJECT, "backend_service": "zopday-bes"}


def make_health_check(client, port: int = 80) -> None:
    check = compute_v1.HealthCheck(
        name="zopday-hc", type_="HTTP",
        http_health_check=compute_v1.HTTPHealthCheck(port=port, request_path="/healthz"),
    )  # fmt: skip
    checks = client(compute_v1.HealthChecksClient)
    succeeded(client, checks.insert(project=PROJECT, health_check_resource=check))


def add_instances(client, *names: str, group: str = "zopday-ig") -> Any:
    """addInstances to the unmanaged group in ZONE; the operation answered."""
    request = compute_v1.InstanceGroupsAddInstancesRequest(
        instances=[compute_v1.InstanceReference(instance=f"zones/{ZONE}/instances/{name}")
                   for name in names]
    )  # fmt: skip
    return client(compute_v1.InstanceGroupsClient).add_instances(
        project=PROJECT, zone=ZONE, instance_group=group,
        instance_groups_add_instances_request_resource=request,
    )  # fmt: skip


def make_zone_group(client, *members: str) -> Any:
    """The unmanaged group zopday-ig in ZONE, serving "http" on 80, with these instances."""
    groups = client(compute_v1.InstanceGroupsClient)
    group = compute_v1.InstanceGroup(
        name="zopday-ig", network="global/networks/zopday-net",
        named_ports=[compute_v1.NamedPort(name="http", port=80)],
    )  # fmt: skip
    succeeded(client, groups.insert(project=PROJECT, zone=ZONE, instance_group_resource=group))
    if members:
        succeeded(client, add_instances(client, *members))
    return groups


def make_backend_service(client, group: str = GROUP) -> Any:
    services = client(compute_v1.BackendServicesClient)
    service = compute_v1.BackendService(
        name="zopday-bes", protocol="HTTP", port_name="http",
        load_balancing_scheme="EXTERNAL_MANAGED", health_checks=["global/healthChecks/zopday-hc"],
        backends=[compute_v1.Backend(group=group, balancing_mode="UTILIZATION")],
    )  # fmt: skip
    succeeded(client, services.insert(project=PROJECT, backend_service_resource=service))
    return services


def make_map_and_proxy(client) -> tuple[Any, Any]:
    """A URL map to zopday-bes and an HTTP proxy to it; returns both clients."""
    maps, proxies = client(compute_v1.UrlMapsClient), client(compute_v1.TargetHttpProxiesClient)
    resource = compute_v1.UrlMap(
        name="zopday-map", default_service="global/backendServices/zopday-bes"
    )
    succeeded(client, maps.insert(project=PROJECT, url_map_resource=resource))
    resource = compute_v1.TargetHttpProxy(name="zopday-proxy", url_map="global/urlMaps/zopday-map")
    succeeded(client, proxies.insert(project=PROJECT, target_http_proxy_resource=resource))
    return maps, proxies


def health(client, group: str = GROUP) -> list[tuple[str, str]]:
    answer = client(compute_v1.BackendServicesClient).get_health(
        **SERVICE, resource_group_reference_resource=compute_v1.ResourceGroupReference(group=group)
    )
    return sorted((short(status.instance), status.health_state) for status in answer.health_status)


def refused(client, operation: Any, user: str) -> None:
    """The delete's operation ends with Compute's in-use error naming the user."""
    [error] = finished(client, operation).error.errors
    assert error.code == "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE"
    assert error.message.endswith(f"is already being used by 'projects/{PROJECT}/{user}'")


def test_the_load_balancer_chain_is_made_in_order_and_deleted_in_reverse(gce, client):
    make_network(client)
    make_template(client)
    succeeded(client, make_instance(client))
    groups = make_zone_group(client, "vm-1")
    make_health_check(client)
    addresses = client(compute_v1.GlobalAddressesClient)
    resource = compute_v1.Address(name="zopday-ip", ip_version="IPV4", labels={"zopday-job": "1"})
    succeeded(client, addresses.insert(project=PROJECT, address_resource=resource))
    address = addresses.get(project=PROJECT, address="zopday-ip")
    assert re.fullmatch(r"34\.120\.\d+\.\d+", address.address)
    assert (address.status, address.address_type, address.ip_version) == (
        "RESERVED", "EXTERNAL", "IPV4"
    )  # fmt: skip
    services = make_backend_service(client)
    maps, proxies = make_map_and_proxy(client)
    rules = client(compute_v1.GlobalForwardingRulesClient)
    resource = compute_v1.ForwardingRule(
        name="zopday-fr", I_p_address=address.self_link, I_p_protocol="TCP", port_range="80",
        target="global/targetHttpProxies/zopday-proxy", load_balancing_scheme="EXTERNAL_MANAGED",
    )  # fmt: skip
    succeeded(client, rules.insert(project=PROJECT, forwarding_rule_resource=resource))

    rule = rules.get(project=PROJECT, forwarding_rule="zopday-fr")
    assert (rule.I_p_address, rule.port_range) == (address.address, "80-80")
    assert rule.target == proxies.get(project=PROJECT, target_http_proxy="zopday-proxy").self_link
    in_use = addresses.get(project=PROJECT, address="zopday-ip")
    assert in_use.status == "IN_USE" and list(in_use.users) == [rule.self_link]
    service = services.get(**SERVICE)
    assert service.backends[0].group.endswith(f"/{GROUP}") and service.port_name == "http"
    assert [name for name in gce.state()["urlMaps"]] == ["zopday-map"]

    # deleted in reverse, each part refused while the one above it stands
    refused(client, addresses.delete(project=PROJECT, address="zopday-ip"),
            "global/forwardingRules/zopday-fr")  # fmt: skip
    delete_proxy = {"project": PROJECT, "target_http_proxy": "zopday-proxy"}
    refused(client, proxies.delete(**delete_proxy), "global/forwardingRules/zopday-fr")
    succeeded(client, rules.delete(project=PROJECT, forwarding_rule="zopday-fr"))
    assert addresses.get(project=PROJECT, address="zopday-ip").status == "RESERVED"
    refused(client, maps.delete(project=PROJECT, url_map="zopday-map"),
            "global/targetHttpProxies/zopday-proxy")  # fmt: skip
    succeeded(client, proxies.delete(**delete_proxy))
    refused(client, services.delete(**SERVICE), "global/urlMaps/zopday-map")
    succeeded(client, maps.delete(project=PROJECT, url_map="zopday-map"))
    checks = client(compute_v1.HealthChecksClient)
    refused(client, checks.delete(project=PROJECT, health_check="zopday-hc"),
            "global/backendServices/zopday-bes")  # fmt: skip
    refused(client, groups.delete(project=PROJECT, zone=ZONE, instance_group="zopday-ig"),
            "global/backendServices/zopday-bes")  # fmt: skip
    succeeded(client, services.delete(**SERVICE))
    succeeded(client, checks.delete(project=PROJECT, health_check="zopday-hc"))
    succeeded(client, groups.delete(project=PROJECT, zone=ZONE, instance_group="zopday-ig"))
    succeeded(client, addresses.delete(project=PROJECT, address="zopday-ip"))
    state = gce.state()
    assert [name for name, items in state.items() if items and name in (
        "addresses", "healthChecks", "instanceGroups", "backendServices", "urlMaps",
        "targetHttpProxies", "forwardingRules",
    )] == []  # fmt: skip
    assert set(state["instances"]) == {"vm-1"}  # the group's members stay


def test_load_balancer_parts_must_name_existing_and_matching_parts(client):
    make_network(client)
    make_zone_group(client)
    services = client(compute_v1.BackendServicesClient)

    def service(**fields: Any) -> Any:
        resource = compute_v1.BackendService(name="zopday-bes", **fields)
        return services.insert(project=PROJECT, backend_service_resource=resource)

    backends = [compute_v1.Backend(group=GROUP)]
    with pytest.raises(exceptions.NotFound, match="global/healthChecks/zopday-hc"):
        service(health_checks=["global/healthChecks/zopday-hc"], backends=backends)
    make_health_check(client)
    with pytest.raises(exceptions.NotFound, match=f"zones/{ZONE}/instanceGroups/elsewhere"):
        service(health_checks=["global/healthChecks/zopday-hc"],
                backends=[compute_v1.Backend(group=f"zones/{ZONE}/instanceGroups/elsewhere")])  # fmt: skip
    with pytest.raises(exceptions.BadRequest, match="needs a health check"):
        service(backends=backends)
    make_backend_service(client)  # EXTERNAL_MANAGED

    maps = client(compute_v1.UrlMapsClient)
    with pytest.raises(exceptions.BadRequest, match="Required field 'resource.defaultService'"):
        maps.insert(project=PROJECT, url_map_resource=compute_v1.UrlMap(name="zopday-map"))
    with pytest.raises(exceptions.NotFound, match="backendServices/other"):
        maps.insert(project=PROJECT, url_map_resource=compute_v1.UrlMap(
            name="zopday-map", default_service="global/backendServices/other"))  # fmt: skip
    make_map_and_proxy(client)

    rules = client(compute_v1.GlobalForwardingRulesClient)

    def rule(**fields: Any) -> Any:
        fields = {"port_range": "80", "load_balancing_scheme": "EXTERNAL_MANAGED"} | fields
        resource = compute_v1.ForwardingRule(
            name="zopday-fr", target="global/targetHttpProxies/zopday-proxy", **fields
        )
        return rules.insert(project=PROJECT, forwarding_rule_resource=resource)

    with pytest.raises(exceptions.BadRequest, match="backend service's is EXTERNAL_MANAGED"):
        rule(load_balancing_scheme="EXTERNAL")
    with pytest.raises(exceptions.BadRequest, match="port 80 or 8080"):
        rule(port_range="443")
    with pytest.raises(exceptions.BadRequest, match="Not a reserved global address"):
        rule(I_p_address="34.120.0.1")
    succeeded(client, rule())  # no address: an ephemeral one
    assert re.fullmatch(
        r"34\.120\.\d+\.\d+", rules.get(project=PROJECT, forwarding_rule="zopday-fr").I_p_address
    )


def test_backend_health_follows_the_bootstrap_and_the_health_checks_port(gce, client):
    make_network(client)
    make_template(client)
    make_template(client, "quiet-tpl", user_data="#cloud-config\n")  # never reports ready
    succeeded(client, make_instance(client))
    succeeded(client, make_instance(client, "quiet", "global/instanceTemplates/quiet-tpl"))
    make_zone_group(client, "vm-1", "quiet")
    make_health_check(client)
    make_backend_service(client)

    assert eventually(lambda: health(client) == [("quiet", "UNHEALTHY"), ("vm-1", "HEALTHY")])
    answer = client(compute_v1.BackendServicesClient).get_health(
        **SERVICE, resource_group_reference_resource=compute_v1.ResourceGroupReference(
            group=f"{gce.url}/compute/v1/projects/{PROJECT}/{GROUP}")
    )  # fmt: skip
    assert answer.kind == "compute#backendServiceGroupHealth"
    status = next(s for s in answer.health_status if s.instance.endswith("/vm-1"))
    assert (status.ip_address, status.port) == (
        instance(client).network_interfaces[0].network_i_p,
        80,
    )

    checks = client(compute_v1.HealthChecksClient)
    patch = compute_v1.HealthCheck(http_health_check=compute_v1.HTTPHealthCheck(port=8080))
    succeeded(client, checks.patch_unary(
        project=PROJECT, health_check="zopday-hc", health_check_resource=patch))  # fmt: skip
    check = checks.get(project=PROJECT, health_check="zopday-hc")
    assert (check.http_health_check.port, check.http_health_check.request_path) == (
        8080,
        "/healthz",
    )
    assert health(client) == [("quiet", "UNHEALTHY"), ("vm-1", "UNHEALTHY")]
    gce.configure(serving_port=8080)  # the service moved too
    assert health(client) == [("quiet", "UNHEALTHY"), ("vm-1", "HEALTHY")]
    stop = client(compute_v1.InstancesClient).stop(project=PROJECT, zone=ZONE, instance="vm-1")
    succeeded(client, stop)
    assert health(client) == [("quiet", "UNHEALTHY"), ("vm-1", "UNHEALTHY")]
    make_group(client, 0)
    with pytest.raises(exceptions.BadRequest, match="Not a backend of"):
        health(client, f"regions/{REGION}/instanceGroups/zopday-mig")


def test_a_managed_groups_own_instance_group_is_a_backend_until_the_group_goes(gce, client):
    make_network(client)
    make_template(client)
    managers = make_group(client, 2)
    manager = managers.get(**MIG)
    assert manager.instance_group.endswith(f"/regions/{REGION}/instanceGroups/zopday-mig")
    groups = client(compute_v1.RegionInstanceGroupsClient)
    where = {"project": PROJECT, "region": REGION, "instance_group": "zopday-mig"}
    request = compute_v1.RegionInstanceGroupsSetNamedPortsRequest(
        named_ports=[compute_v1.NamedPort(name="http", port=80)]
    )
    succeeded(client, groups.set_named_ports_unary(
        **where, region_instance_groups_set_named_ports_request_resource=request))  # fmt: skip
    group = groups.get(**where)
    assert group.size == 2 and [(p.name, p.port) for p in group.named_ports] == [("http", 80)]
    assert group.network.endswith("/global/networks/zopday-net")
    assert [(p.name, p.port) for p in managers.get(**MIG).named_ports] == [("http", 80)]
    assert [g.name for g in groups.list(project=PROJECT, region=REGION)] == ["zopday-mig"]
    listed = groups.list_instances(
        **where, region_instance_groups_list_instances_request_resource=(
            compute_v1.RegionInstanceGroupsListInstancesRequest(instance_state="ALL"))
    )  # fmt: skip
    members = {short(member.instance) for member in listed}
    assert members == {short(m.instance) for m in managers.list_managed_instances(**MIG)}

    make_health_check(client)
    make_backend_service(client, manager.instance_group)
    states = lambda: {state for _, state in health(client, manager.instance_group)}  # noqa: E731
    assert eventually(lambda: states() == {"HEALTHY"})
    assert len(health(client, manager.instance_group)) == 2

    refused(client, managers.delete(**MIG), "global/backendServices/zopday-bes")
    assert len(gce.state()["instances"]) == 2  # the refused delete touched nothing
    succeeded(client, client(compute_v1.BackendServicesClient).delete(**SERVICE))
    succeeded(client, managers.delete(**MIG))
    with pytest.raises(exceptions.NotFound):
        groups.get(**where)
    assert gce.state()["instanceGroups"] == {} and gce.state()["instances"] == {}


def test_patches_merge_into_firewalls_and_backend_services(gce, client):
    make_network(client)
    firewalls = client(compute_v1.FirewallsClient)
    resource = compute_v1.Firewall(
        name="zopday-lb", network="global/networks/zopday-net", target_tags=["zopday"],
        source_ranges=["130.211.0.0/22", "35.191.0.0/16"],
        allowed=[compute_v1.Allowed(I_p_protocol="tcp", ports=["80", "8080"])],
    )  # fmt: skip
    succeeded(client, firewalls.insert(project=PROJECT, firewall_resource=resource))
    patch = compute_v1.Firewall(allowed=[compute_v1.Allowed(I_p_protocol="tcp", ports=["8081"])])
    operation = firewalls.patch_unary(
        project=PROJECT, firewall="zopday-lb", firewall_resource=patch
    )
    assert succeeded(client, operation).operation_type == "patch"
    stored = gce.state()["firewalls"]["zopday-lb"]
    assert stored["allowed"] == [{"IPProtocol": "tcp", "ports": ["8081"]}]  # replaced as a whole
    assert stored["sourceRanges"] == ["130.211.0.0/22", "35.191.0.0/16"]
    assert (stored["targetTags"], stored["priority"]) == (["zopday"], 1000)
    with pytest.raises(exceptions.BadRequest, match="name cannot change"):
        firewalls.patch_unary(project=PROJECT, firewall="zopday-lb",
                              firewall_resource=compute_v1.Firewall(name="other"))  # fmt: skip
    with pytest.raises(exceptions.NotFound):
        firewalls.patch_unary(project=PROJECT, firewall="nowhere", firewall_resource=patch)

    make_zone_group(client)
    make_health_check(client)
    services = make_backend_service(client)
    before = services.get(**SERVICE)

    def patch_service(**fields: Any) -> Any:
        resource = compute_v1.BackendService(**fields)
        return services.patch_unary(**SERVICE, backend_service_resource=resource)

    with pytest.raises(exceptions.NotFound, match="global/healthChecks/missing"):
        patch_service(health_checks=["global/healthChecks/missing"])
    succeeded(client, patch_service(timeout_sec=60, fingerprint=before.fingerprint))
    with pytest.raises(exceptions.PreconditionFailed, match="fingerprint"):
        patch_service(timeout_sec=90, fingerprint=before.fingerprint)  # stale now
    after = services.get(**SERVICE)
    assert (after.timeout_sec, after.port_name, len(after.backends)) == (60, "http", 1)
    checks = client(compute_v1.HealthChecksClient)
    with pytest.raises(exceptions.BadRequest, match="HTTP checks only"):
        checks.patch_unary(project=PROJECT, health_check="zopday-hc",
                           health_check_resource=compute_v1.HealthCheck(type_="TCP"))  # fmt: skip


def test_an_unmanaged_group_adds_lists_and_removes_its_instances(gce, client):
    make_network(client)
    make_template(client)
    for name in ("vm-1", "vm-2"):
        succeeded(client, make_instance(client, name))
    request = compute_v1.InsertInstanceRequest(
        project=PROJECT, zone="us-central1-b", instance_resource=compute_v1.Instance(name="vm-b"),
        source_instance_template="global/instanceTemplates/zopday-tpl",
    )  # fmt: skip
    succeeded(client, client(compute_v1.InstancesClient).insert(request=request))
    groups = make_zone_group(client)
    where = {"project": PROJECT, "zone": ZONE, "instance_group": "zopday-ig"}
    assert groups.get(**where).size == 0

    succeeded(client, add_instances(client, "vm-1", "vm-2"))
    with pytest.raises(exceptions.BadRequest) as twice:
        add_instances(client, "vm-1")
    assert twice.value.errors[0]["reason"] == "memberAlreadyExists"
    with pytest.raises(exceptions.NotFound, match="instances/vm-9"):
        add_instances(client, "vm-9")
    with pytest.raises(exceptions.BadRequest, match=f"Not in zone {ZONE}"):
        ref = compute_v1.InstanceReference(instance="zones/us-central1-b/instances/vm-b")
        groups.add_instances(**where, instance_groups_add_instances_request_resource=(
            compute_v1.InstanceGroupsAddInstancesRequest(instances=[ref])))  # fmt: skip
    listed = list(groups.list_instances(**where))  # no request body, as the provider calls it
    assert sorted((short(item.instance), item.status) for item in listed) == [
        ("vm-1", "RUNNING"), ("vm-2", "RUNNING")
    ]  # fmt: skip
    assert [(p.name, p.port) for p in listed[0].named_ports] == [("http", 80)]

    remove = compute_v1.InstanceGroupsRemoveInstancesRequest(
        instances=[compute_v1.InstanceReference(instance=f"zones/{ZONE}/instances/vm-1")]
    )
    succeeded(client, groups.remove_instances(
        **where, instance_groups_remove_instances_request_resource=remove))  # fmt: skip
    assert [short(item.instance) for item in groups.list_instances(**where)] == ["vm-2"]
    with pytest.raises(exceptions.BadRequest, match="is not a member"):
        groups.remove_instances(**where, instance_groups_remove_instances_request_resource=remove)

    group = groups.get(**where)
    ports = compute_v1.InstanceGroupsSetNamedPortsRequest(
        named_ports=[compute_v1.NamedPort(name="http", port=8080)], fingerprint=group.fingerprint
    )
    succeeded(client, groups.set_named_ports(
        **where, instance_groups_set_named_ports_request_resource=ports))  # fmt: skip
    with pytest.raises(exceptions.PreconditionFailed):  # the fingerprint moved on
        groups.set_named_ports(**where, instance_groups_set_named_ports_request_resource=ports)
    group = groups.get(**where)
    assert group.size == 1 and [(p.name, p.port) for p in group.named_ports] == [("http", 8080)]

    delete = client(compute_v1.InstancesClient).delete(project=PROJECT, zone=ZONE, instance="vm-2")
    succeeded(client, delete)
    assert groups.get(**where).size == 0  # a deleted instance leaves its groups
    assert gce.state()["instanceGroups"]["zopday-ig"]["members"] == []


# ---- Cloud DNS ----------------------------------------------------------------------------------
DNS_ZONE = {"name": "zopday-zone", "dnsName": "example.com.", "description": "ZopDay",
            "visibility": "public", "labels": {"zopday-job": "job-1"}}  # fmt: skip
WWW = {"name": "www.example.com.", "type": "A", "ttl": 300, "rrdatas": ["34.120.1.2"]}


@pytest.fixture
def dns(gce, credentials) -> Callable[..., requests.Response]:
    """dns("POST", "/zone/changes", json=...) → the answer of .../managedZones/zone/changes."""
    session = AuthorizedSession(credentials)
    zones = f"{gce.url}/dns/v1/projects/{PROJECT}/managedZones"
    return lambda method, path="", **kwargs: session.request(
        method, zones + path, timeout=5, **kwargs
    )


def reason(answer: requests.Response) -> tuple[int, str]:
    return answer.status_code, answer.json()["error"]["errors"][0]["reason"]


def test_dns_zones_are_created_listed_by_name_refused_twice_and_deleted(dns):
    created = dns("POST", json=DNS_ZONE)
    assert created.status_code == 200
    zone = created.json()
    assert zone["kind"] == "dns#managedZone" and zone["id"] and zone["creationTime"]
    assert len(zone["nameServers"]) == 4
    assert all(re.fullmatch(r"ns-cloud-[a-e][1-4]\.googledomains\.com\.", ns)
               for ns in zone["nameServers"])  # fmt: skip
    assert dns("POST", json=DNS_ZONE | {"name": "other", "dnsName": "example.org."}).ok

    def names(**params: str) -> list[str]:
        return [zone["name"] for zone in dns("GET", params=params).json()["managedZones"]]

    assert names(dnsName="example.com.") == ["zopday-zone"]
    assert names(dnsName="nowhere.com.") == []
    assert sorted(names()) == ["other", "zopday-zone"]

    again = dns("POST", json=DNS_ZONE)
    assert reason(again) == (409, "alreadyExists")
    assert again.json()["error"]["code"] == 409
    assert again.json()["error"]["errors"][0]["domain"] == "global"
    assert reason(dns("POST", json=DNS_ZONE | {"name": "z2", "dnsName": "example.net"})) == (
        400, "invalid"
    )  # fmt: skip
    assert dns("GET", f"/{zone['id']}").json()["name"] == "zopday-zone"  # by id as by name
    sets = dns("GET", "/zopday-zone/rrsets").json()["rrsets"]
    assert [(s["name"], s["type"], s["ttl"]) for s in sets] == [
        ("example.com.", "SOA", 21600), ("example.com.", "NS", 21600)
    ]  # fmt: skip
    assert sets[1]["rrdatas"] == zone["nameServers"]

    deleted = dns("DELETE", "/other")
    assert deleted.status_code == 204 and deleted.content == b""
    missing = dns("GET", "/other")
    assert reason(missing) == (404, "notFound")
    assert missing.json()["error"]["message"] == (
        "The 'parameters.managedZone' resource named 'other' does not exist."
    )


def test_dns_changes_add_and_delete_record_sets_exactly(gce, dns):
    dns("POST", json=DNS_ZONE)
    change = dns("POST", "/zopday-zone/changes", json={"additions": [WWW]})
    assert change.status_code == 200
    assert change.json()["kind"] == "dns#change" and change.json()["status"] == "done"
    found = dns("GET", "/zopday-zone/rrsets", params={"name": WWW["name"], "type": "A"})
    assert found.json()["rrsets"] == [WWW | {"kind": "dns#resourceRecordSet"}]

    assert reason(dns("POST", "/zopday-zone/changes", json={"additions": [WWW]})) == (
        409, "alreadyExists"
    )  # fmt: skip
    outside = WWW | {"name": "www.example.org."}
    assert reason(dns("POST", "/zopday-zone/changes", json={"additions": [outside]})) == (
        400, "invalid"
    )  # fmt: skip
    stale = WWW | {"ttl": 60}
    mismatched = dns("POST", "/zopday-zone/changes", json={"deletions": [stale]})
    assert reason(mismatched) == (412, "conditionNotMet")
    assert reason(dns("DELETE", "/zopday-zone")) == (400, "containerNotEmpty")

    moved = WWW | {"rrdatas": ["34.120.3.4"]}
    replace = {"deletions": found.json()["rrsets"], "additions": [moved]}
    assert dns("POST", "/zopday-zone/changes", json=replace).json()["id"] == "2"
    rrsets = gce.state()["managedZones"]["zopday-zone"]["rrsets"]
    assert [s["rrdatas"] for s in rrsets if s["name"] == WWW["name"]] == [["34.120.3.4"]]
    assert dns("POST", "/zopday-zone/changes", json={"deletions": [moved]}).ok
    assert dns("DELETE", "/zopday-zone").status_code == 204
    assert gce.state()["managedZones"] == {}


def test_reset_forgets_the_load_balancer_parts_and_the_dns_zones(gce, client, dns):
    make_health_check(client)
    dns("POST", json=DNS_ZONE)
    state = gce.state()
    assert set(state["healthChecks"]) == {"zopday-hc"} and set(state["managedZones"]) == {
        "zopday-zone"
    }
    assert state["config"]["serving_port"] == 80
    gce.reset()
    assert gce.state()["healthChecks"] == {} and gce.state()["managedZones"] == {}


# ---- IAM --------------------------------------------------------------------------------------
def test_service_accounts_are_created_read_refused_twice_and_deleted(gce, credentials):
    session = AuthorizedSession(credentials)
    accounts = f"{gce.url}/v1/projects/{PROJECT}/serviceAccounts"
    body = {"accountId": "zopday-job-1", "serviceAccount": {"displayName": "ZopDay job 1"}}

    created = session.post(accounts, json=body, timeout=5)
    assert created.status_code == 200
    email = f"zopday-job-1@{PROJECT}.iam.gserviceaccount.com"
    assert created.json()["email"] == email and created.json()["displayName"] == "ZopDay job 1"
    read = session.get(f"{accounts}/{email}", timeout=5).json()
    assert read["name"] == f"projects/{PROJECT}/serviceAccounts/{email}"

    again = session.post(accounts, json=body, timeout=5)
    assert again.status_code == 409 and again.json()["error"]["status"] == "ALREADY_EXISTS"
    assert session.post(accounts, json={"accountId": "Bad"}, timeout=5).status_code == 400

    assert session.delete(f"{accounts}/{email}", timeout=5).json() == {}
    missing = session.get(f"{accounts}/{email}", timeout=5)
    assert missing.status_code == 404
    assert missing.json()["error"] == {
        "code": 404, "message": "Unknown service account", "status": "NOT_FOUND"
    }  # fmt: skip


# ---- the SDK's trap, control and standalone ---------------------------------------------------
def test_the_sdks_own_operation_poller_ignores_the_endpoint(client):
    """Why the provider polls with its own operations clients: ExtendedOperation.result() asks
    an operations client that the SDK builds without the client options."""
    poller = client(compute_v1.InstancesClient)._transport._zone_operations_client
    assert poller._transport._host == "https://compute.googleapis.com"


def test_another_process_resets_configures_and_reads_the_fake_over_http(gce, client):
    make_network(client)
    control = f"{gce.url}/_fake"
    assert requests.post(f"{control}/configure", json={"instance_quota": 3}, timeout=5).ok
    state = requests.get(f"{control}/state", timeout=5).json()
    assert state["config"]["instance_quota"] == 3 and "zopday-net" in state["networks"]
    assert requests.post(f"{control}/configure", json={"nonsense": 1}, timeout=5).status_code == 400
    assert requests.post(f"{control}/reset", timeout=5).ok
    assert gce.state()["networks"] == {} and gce.state()["config"]["instance_quota"] == 24


def test_the_module_serves_standalone_and_prints_its_url():
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.gce", "--port", "0"],
        cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert requests.get(f"{url}/_fake/state", timeout=5).json()["networks"] == {}
    finally:
        process.terminate()
        process.wait(timeout=10)
