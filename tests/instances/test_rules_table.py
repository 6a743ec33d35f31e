"""Every declared action refuses outsiders and viewers, page and API alike: the cases are read
from the declarations (power operations, the tabs' row views, the row rules), so an action
added there is tested here without a line more."""

import pytest
from django.test import Client
from django.urls import reverse

from instances.choices import Outcome, SnapshotState
from instances.errors import ActionRefused
from instances.models import AuditEvent, Disk, DiskSnapshot, ElasticIP
from instances.power_operations import POWER_OPERATIONS
from instances.row_rules import DISK_RULES, NIC_RULES, SNAPSHOT_RULES
from instances.services.instances import DiskRequest, instance_create
from instances.views.networking import NIC_VIEWS
from instances.views.storage import DISK_VIEWS
from tests.factories import SubnetFactory, instance_request

pytestmark = pytest.mark.django_db

# the API routes of the row actions, with a body each accepts: {…} names the setup's ids
ROW_ROUTES = [
    ("post", "/projects/alpha/disks/{free}/attach", {"instance": "{instance}"}),
    ("delete", "/projects/alpha/disks/{free}", None),
    ("post", "/projects/alpha/disks/{disk}/detach", None),
    ("post", "/projects/alpha/disks/{disk}/resize", {"size_gb": 9}),
    ("post", "/projects/alpha/disks/{disk}/snapshots", {"name": "later"}),
    ("post", "/projects/alpha/instances/{instance}/snapshots", {"name": "later"}),
    ("delete", "/projects/alpha/disks/{disk}/snapshots/{snapshot}", None),
    ("post", "/projects/alpha/disks/{disk}/snapshots/{snapshot}/revert", {"confirm": True}),
    ("delete", "/projects/alpha/instances/{instance}/nics/{nic}", None),
    ("post", "/projects/alpha/instances/{instance}/nics/{nic}/link", {"up": False}),
]


@pytest.fixture
def setup(project, operator, subnet):
    """A stopped instance with a secondary disk holding a ready snapshot, a second interface,
    a free disk and a free Elastic IP: every row action has its row."""
    instance = instance_create(
        project=project,
        actor=operator,
        request=instance_request(subnet, disks=[DiskRequest(size_gb=2)]),
    )
    disk = instance.disks.get(role="secondary")
    snapshot = DiskSnapshot.objects.create(disk=disk, name="first", state=SnapshotState.READY)
    nic = instance.nics.create(
        subnet=SubnetFactory(project=project, zone=instance.zone), index=1, mac="52:54:00:00:00:09"
    )
    free = Disk.objects.create(project=project, zone=instance.zone, name="spare", size_gb=1)
    eip = ElasticIP.objects.create(project=project, address="198.51.100.9")
    ids = {"instance": instance.pk, "disk": disk.pk, "snapshot": snapshot.pk, "nic": nic.pk}
    return instance, ids | {"free": free.pk, "eip": eip.pk}


def _changes():
    return AuditEvent.objects.exclude(outcome=Outcome.DENIED).count()


def _form(ids, action):
    """What the tab's form of that action posts."""
    if action in ("attach", "delete-free"):
        return {"disk": ids["free"], "confirm": "1"}
    if action in ("revert", "delete-snapshot"):
        return {"snapshot": ids["snapshot"], "confirm": "1"}
    if action in ("associate-eip", "release-eip"):
        return {"nic": ids["nic"], "eip": ids["eip"]}
    return {
        "disk": ids["disk"], "nic": ids["nic"], "size_gb": "9", "name": "later", "up": "0",
        "confirm_primary": "1", "subnet": "", "image": "",
    }  # fmt: skip


PAGE_POSTS = [
    *[("instance-power", op.name) for op in POWER_OPERATIONS],
    *[("instance-disk-action", action) for action in DISK_VIEWS],
    *[("instance-nic-action", action) for action in NIC_VIEWS],
]


@pytest.mark.parametrize(("url_name", "action"), PAGE_POSTS)
def test_an_outsider_gets_404_for_every_page_action(client_for, outsider, setup, url_name, action):
    instance, ids = setup
    before = _changes()
    url = reverse(url_name, args=["alpha", instance.pk, action])
    assert client_for("outsider").post(url, _form(ids, action)).status_code == 404
    assert _changes() == before


@pytest.mark.parametrize(("url_name", "action"), PAGE_POSTS)
def test_a_viewer_is_refused_every_page_action_with_the_reason(
    client_for, viewer, setup, url_name, action
):
    instance, ids = setup
    before = _changes()
    url = reverse(url_name, args=["alpha", instance.pk, action])
    response = client_for("viewer").post(url, _form(ids, action), follow=True)
    assert response.status_code == 200
    assert "Needs the operator role." in response.text
    assert _changes() == before


API_ROUTES = [
    *[
        ("post", f"/projects/alpha/instances/{{instance}}/{op.path}", None)
        for op in POWER_OPERATIONS
    ],
    *ROW_ROUTES,
]


def _send(api, method, path, body, ids):
    path = path.format(**ids)
    if method == "delete":
        return api.delete(path)
    named = {key: ids[value[1:-1]] if str(value).startswith("{") else value
             for key, value in (body or {}).items()}  # fmt: skip
    return api.post(path, named if body is not None else None)


@pytest.mark.parametrize(("method", "path", "body"), API_ROUTES)
def test_an_outsider_gets_404_for_every_api_action(api_for, outsider, setup, method, path, body):
    _, ids = setup
    api = api_for("outsider")
    before = _changes()
    assert _send(api, method, path, body, ids).status_code == 404
    assert _changes() == before


@pytest.mark.parametrize(("method", "path", "body"), API_ROUTES)
def test_a_viewer_gets_403_for_every_api_action(api_for, viewer, setup, method, path, body):
    _, ids = setup
    api = api_for("viewer")
    before = _changes()
    response = _send(api, method, path, body, ids)
    assert response.status_code == 403
    assert response.json()["detail"] == "This needs the operator role in Alpha."
    assert _changes() == before


RULES = [
    *[("disk", name, rule) for name, rule in DISK_RULES.items()],
    *[("snapshot", name, rule) for name, rule in SNAPSHOT_RULES.items()],
    *[("nic", name, rule) for name, rule in NIC_RULES.items()],
]


@pytest.mark.parametrize(("row", "name", "rule"), RULES, ids=lambda case: str(case))
def test_every_row_rule_refuses_viewers_and_outsiders(project, setup, row, name, rule):
    from instances.choices import Role

    instance, ids = setup
    item = {
        "disk": Disk.objects.get(pk=ids["disk"]),
        "snapshot": DiskSnapshot.objects.get(pk=ids["snapshot"]),
        "nic": instance.nics.get(pk=ids["nic"]),
    }[row]
    for role in (Role.VIEWER, None):
        assert not rule(item, role)


def test_a_client_without_login_is_sent_to_log_in(setup):
    instance, ids = setup
    url = reverse("instance-disk-action", args=["alpha", instance.pk, "detach"])
    assert Client().post(url, {"disk": ids["disk"]}).status_code == 302


@pytest.mark.parametrize("state", ["stopped", "running", "failed"])
def test_the_tabs_show_a_row_button_exactly_when_the_service_would_not_hide_it(
    client_for, operator, setup, state
):
    """The template asks the row's rule; the service refuses by the same rule."""
    from instances.models import Instance
    from instances.services import network, storage

    instance, ids = setup
    Instance.objects.filter(pk=instance.pk).update(power_state=state)
    instance.refresh_from_db()
    root = instance.disks.get(role="root")
    nic = instance.nics.get(pk=ids["nic"])
    storage_tab = client_for("operator").get(
        reverse("instance-detail", args=["alpha", instance.pk]), {"tab": "storage"}
    )
    networking_tab = client_for("operator").get(
        reverse("instance-detail", args=["alpha", instance.pk]), {"tab": "networking"}
    )
    root_row = storage_tab.text.split(f'data-disk="{root.name}"')[1].split("</tr>")[0]
    assert ">Detach</button>" not in root_row  # a root disk is never detached
    with pytest.raises(ActionRefused, match="root disk"):
        storage.disk_detach(disk=root, actor=operator)
    removable = f'name="nic" value="{nic.pk}"><button>Remove</button>' in networking_tab.text
    assert removable == (state == "stopped")
    if not removable:
        with pytest.raises(ActionRefused, match="Stop the instance"):
            network.nic_remove(nic=nic, actor=operator)


def test_the_elastic_ip_buttons_follow_the_rows_rules(client_for, operator, setup):
    """Associate shows for an interface with a private IPv4 address and no Elastic IP yet,
    Disassociate for one that has one; the service refuses by the same rule, at the field."""
    from django.core.exceptions import ValidationError

    from instances.services import network

    instance, ids = setup
    url = reverse("instance-detail", args=["alpha", instance.pk])
    eip = ElasticIP.objects.get(pk=ids["eip"])
    primary, second = instance.nics.order_by("index")
    instance.nics.filter(pk=second.pk).update(ipv4=None)
    second.refresh_from_db()

    def row(nic):
        page = client_for("operator").get(url, {"tab": "networking"}).text
        return page.split(f'data-nic="{nic.name}"')[1].split("</tr>")[0]

    assert ">Associate</button>" in row(primary) and ">Associate</button>" not in row(second)
    with pytest.raises(ValidationError, match="no private IPv4 address") as refused:
        network.eip_associate(eip=eip, nic=second, actor=operator)
    assert "nic" in refused.value.message_dict
    network.eip_associate(eip=eip, nic=primary, actor=operator)
    network.eip_associate(eip=eip, nic=primary, actor=operator)  # again: nothing changes
    assert ">Disassociate IP</button>" in row(primary)
    assert ">Associate</button>" not in row(primary)
