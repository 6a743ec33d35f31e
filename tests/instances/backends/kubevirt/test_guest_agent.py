"""The guest agent of an instance on a cluster, as KubeVirt relays it: the fake's virt-handler
asks the real qemu-ga of the QEMU guest behind the VMI, sets AgentConnected and the VMI's
guestOSInfo and interfaces, and serves guestosinfo, filesystemlist and userlist shaped as
KubeVirt's API documents them; the console's guest report and Overview read them."""

import time

import pytest
from jsonschema import Draft4Validator

from instances.backends import backend_named
from instances.backends.base import BackendError
from instances.backends.kubevirt.guest import NOT_CONNECTED, read_subresource
from instances.backends.kubevirt.objects import NamespaceObjects
from instances.choices import PowerState
from instances.models import GuestReport
from instances.services import guest_reports, power
from tests.fakes.kubevirt import schemas
from tests.fakes.kubevirt.fixtures import (
    api_client,
    create,
    type_on_serial,
    wait_for_prompt,
    wait_for_state,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def answer_problems(definition: str, body: dict) -> list[str]:
    """What in `body` KubeVirt's OpenAPI definition does not take (unknown fields included)."""
    definitions = schemas._definitions()["kubevirt"]
    check = Draft4Validator({"$ref": f"#/definitions/{definition}", "definitions": definitions})
    return [f"{list(error.absolute_path)}: {error.message}" for error in check.iter_errors(body)]


def vmi_of(kube_api, instance) -> dict:
    namespace = f"zop-{instance.project.slug}"
    return next(
        body for key, body in kube_api.store.objects.items()
        if key[0].kind == "VirtualMachineInstance" and key[1:] == (namespace, instance.machine_id)
    )  # fmt: skip


def connected(vmi: dict) -> bool:
    return any(
        c["type"] == "AgentConnected" and c["status"] == "True"
        for c in vmi.get("status", {}).get("conditions", [])
    )


def wait_until(condition, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.3)


def test_the_agent_of_a_guest_on_a_cluster_reports_through_kubevirt_to_the_overview(
    celery_worker_process, kube_api, kubevirt, cluster, watching, cluster_lan, operator, client
):
    instance = create(operator, cluster_lan)
    power.instance_start(instance=instance, actor=operator)
    instance = wait_for_state(instance, PowerState.RUNNING)
    wait_for_prompt(kubevirt, instance)
    wait_until(
        lambda: (
            connected(vmi_of(kube_api, instance))
            and any(
                "ipAddress" in i for i in vmi_of(kube_api, instance)["status"].get("interfaces", [])
            )
        ),
        "connected, with the guest's address",
    )
    vmi = vmi_of(kube_api, instance)
    assert answer_problems("v1.VirtualMachineInstance", vmi) == []
    [eth0] = vmi["status"]["interfaces"]
    assert eth0["name"] == "eth0" and eth0["infoSource"] == "domain, guest-agent"
    assert eth0["ipAddress"] == "10.91.0.10/24" and eth0["linkState"] == "up"
    assert vmi["status"]["guestOSInfo"]["prettyName"]

    objects = NamespaceObjects(api_client(kube_api), f"zop-{instance.project.slug}")
    info = read_subresource(objects, instance.machine_id, "guestosinfo")
    assert answer_problems("v1.VirtualMachineInstanceGuestAgentInfo", info) == []
    assert info["hostname"] == "web" and info["guestAgentVersion"]
    assert info["os"] == vmi["status"]["guestOSInfo"]
    filesystems = read_subresource(objects, instance.machine_id, "filesystemlist")
    assert answer_problems("v1.VirtualMachineInstanceFileSystemList", filesystems) == []
    mounted = {item["mountPoint"] for item in filesystems["items"]}
    assert mounted and mounted >= {disk["mountPoint"] for disk in info["fsInfo"]["disks"]}
    users = read_subresource(objects, instance.machine_id, "userlist")
    assert answer_problems("v1.VirtualMachineInstanceGuestOSUserList", users) == []

    guest_reports.guest_reports_clusters()  # the poll of the clusters' running instances
    report = GuestReport.objects.get(instance=instance)
    assert report.error == "" and report.hostname == "web"
    assert report.os == info["os"]["prettyName"]
    assert report.interfaces[0]["addresses"][0] == "10.91.0.10/24"
    assert report.interfaces[0]["carrier"] is True
    assert {fs["mountpoint"] for fs in report.filesystems} == mounted
    client.force_login(operator)
    page = client.get(f"/projects/{instance.project.slug}/instances/{instance.pk}/?tab=overview")
    html = page.content.decode()
    assert f"OS {report.os}" in html and "10.91.0.10/24" in html and "carrier" in html

    # qemu-ga stops in the guest: KubeVirt drops AgentConnected, virt-api answers 409 and the
    # report says why, in one line, keeping the last facts
    stop_agent = 'mv "$(command -v qemu-ga)" /root/qemu-ga.off; killall qemu-ga\r'
    type_on_serial(kubevirt, instance, stop_agent)
    wait_until(lambda: not connected(vmi_of(kube_api, instance)), "disconnected")
    with pytest.raises(BackendError, match="not connected"):
        read_subresource(objects, instance.machine_id, "guestosinfo")
    report = guest_reports.guest_report(instance)
    assert report.error == NOT_CONNECTED and report.hostname == "web"
    with pytest.raises(BackendError, match="not connected"):
        backend_named("kubevirt").guest_facts(instance.machine_id)
    html = client.get(
        f"/projects/{instance.project.slug}/instances/{instance.pk}/?tab=overview"
    ).content.decode()
    assert "qemu-guest-agent is not running in the guest" in html
