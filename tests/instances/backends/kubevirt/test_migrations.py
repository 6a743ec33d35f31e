"""The fake's live migration against real QEMU guests: a VirtualMachineInstanceMigration moves
a running VMI to another node of its zone, through KubeVirt's phases, and the guest runs on."""

import json
import socket
import time

import pytest
from kubernetes import client

from instances.backends.kubevirt.manifests import Placement
from instances.backends.kubevirt.objects import KUBEVIRT, NamespaceObjects
from tests.fakes.kubevirt.fixtures import KERNEL_IMAGE, api_client
from tests.fakes.kubevirt.store import BY_KIND
from tests.instances.backends.kubevirt.test_controller import NAMESPACE, SPEC, wait_for

pytestmark = pytest.mark.integration

MIGRATION, VMI = BY_KIND["VirtualMachineInstanceMigration"], BY_KIND["VirtualMachineInstance"]
MACHINE = f"{NAMESPACE}-i-1"


def run_in(kube_api, kubevirt, zone: str, memory: str = "") -> None:
    """The VM of SPEC, running in `zone`, at its shell prompt."""
    objects = NamespaceObjects(api_client(kube_api), NAMESPACE)
    placement = Placement(NAMESPACE, "Always", zone=zone, kernel_image=KERNEL_IMAGE)
    objects.define(SPEC, placement, lambda disk: "")
    wait_for(lambda: vmi_status(kube_api).get("phase") == "Running", "Running")
    wait_for(lambda: b"root@i-1:/# " in serial_log(kubevirt, kube_api), "at the shell prompt")


def vmi_status(kube_api) -> dict:
    return (kube_api.store.find(VMI, NAMESPACE, "i-1") or {}).get("status", {})


def serial_log(kubevirt, kube_api) -> bytes:
    node = vmi_status(kube_api).get("nodeName", "node-1")
    path = kubevirt.node_backend(node).serial_log(MACHINE)
    return path.read_bytes() if path.exists() else b""


def type_on_serial(kubevirt, node: str, text: str) -> None:
    with socket.socket(socket.AF_UNIX) as console:
        console.connect(str(kubevirt.node_backend(node).console_socket(MACHINE, "serial")))
        console.sendall(text.encode())
        time.sleep(0.3)  # let the UART drain before the socket closes


def migrate(kube_api, name: str = "move-1", vmi: str = "i-1") -> dict:
    custom = client.CustomObjectsApi(api_client(kube_api))
    body = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": name}, "spec": {"vmiName": vmi}}  # fmt: skip
    made = custom.create_namespaced_custom_object(
        *KUBEVIRT, NAMESPACE, "virtualmachineinstancemigrations", body
    )
    assert isinstance(made, dict)
    return made


def phase_of(kube_api, name: str = "move-1") -> str:
    return (kube_api.store.find(MIGRATION, NAMESPACE, name) or {}).get("status", {}).get("phase")


def test_a_migration_moves_the_running_guest_to_the_other_node_of_its_zone(kube_api, kubevirt):
    run_in(kube_api, kubevirt, "zone-a")
    assert vmi_status(kube_api)["nodeName"] == "node-1"
    phases: list[str] = []
    kube_api.store.listeners.append(
        lambda event: (
            event.resource == MIGRATION
            and (phase := event.object.get("status", {}).get("phase"))
            and (not phases or phases[-1] != phase)
            and phases.append(phase)
        )
    )

    migrate(kube_api)
    wait_for(lambda: phase_of(kube_api) in ("Succeeded", "Failed"), "ended", timeout=120)

    assert phases == ["Pending", "Scheduling", "Scheduled", "PreparingTarget", "TargetReady",
                      "Running", "Succeeded"]  # fmt: skip
    status = vmi_status(kube_api)
    state = status["migrationState"]
    assert (status["nodeName"], status["phase"]) == ("node-3", "Running")
    assert (state["sourceNode"], state["targetNode"]) == ("node-1", "node-3")
    assert (state["completed"], state["failed"]) == (True, False)
    assert state["startTimestamp"] <= state["endTimestamp"]
    migration = kube_api.store.get(MIGRATION, NAMESPACE, "move-1")
    assert migration["status"]["migrationState"]["targetNode"] == "node-3"
    assert kubevirt.node_backend("node-1").running_machines() == []
    type_on_serial(kubevirt, "node-3", "echo moved-$((40+2))\n")  # the guest answers there
    wait_for(lambda: b"moved-42" in serial_log(kubevirt, kube_api), "an answer", timeout=60)
    assert b"Linux version" not in serial_log(kubevirt, kube_api)  # it did not boot again


def test_a_vmi_with_no_other_node_in_its_zone_stays_on_its_node(kube_api, kubevirt):
    kubevirt.migrations.unschedulable_timeout = 1.0
    run_in(kube_api, kubevirt, "zone-b")

    migrate(kube_api)
    wait_for(lambda: phase_of(kube_api) in ("Succeeded", "Failed"), "ended", timeout=60)

    assert phase_of(kube_api) == "Failed"
    status = vmi_status(kube_api)
    assert (status["nodeName"], status["phase"]) == ("node-2", "Running")
    assert "migrationState" not in status  # it never had a target
    state = kube_api.store.get(MIGRATION, NAMESPACE, "move-1")["status"]["migrationState"]
    assert (state["completed"], state["failed"]) == (True, True)
    assert "could not be scheduled" in state["failureReason"]
    assert migrate(kube_api, "move-2")["spec"]["vmiName"] == "i-1"  # an ended one holds none off


def test_the_webhook_refuses_a_vmi_that_is_not_running(kube_api, kubevirt):
    objects = NamespaceObjects(api_client(kube_api), NAMESPACE)
    placement = Placement(NAMESPACE, "Always", zone="zone-a", kernel_image=KERNEL_IMAGE)
    objects.define(SPEC.__class__(**{**SPEC.__dict__, "memory_mb": 64 * 1024}), placement,
                   lambda disk: "")  # fmt: skip
    wait_for(lambda: vmi_status(kube_api).get("phase") == "Scheduling", "unschedulable")

    with pytest.raises(client.ApiException) as refused:
        migrate(kube_api)

    assert refused.value.status == 400
    assert json.loads(refused.value.body)["message"] == (
        'admission webhook "migration-create-validator.kubevirt.io" denied the request: '
        "Cannot migrate VMI that's not running."
    )
    assert kube_api.store.find(MIGRATION, NAMESPACE, "move-1") is None
    with pytest.raises(client.ApiException) as missing:
        migrate(kube_api, vmi="nothing")
    assert 'the VMI "zop-web/nothing" does not exist' in json.loads(missing.value.body)["message"]


def test_deleting_a_migration_under_way_aborts_it_and_the_guest_stays(kube_api, kubevirt):
    run_in(kube_api, kubevirt, "zone-a")
    kubevirt.migrations.held = True  # still converging when it is deleted
    migrate(kube_api)
    wait_for(lambda: phase_of(kube_api) == "Running", "Running", timeout=60)

    client.CustomObjectsApi(api_client(kube_api)).delete_namespaced_custom_object(
        *KUBEVIRT, NAMESPACE, "virtualmachineinstancemigrations", "move-1"
    )
    wait_for(lambda: vmi_status(kube_api)["migrationState"].get("abortStatus"), "aborted", 60)

    status = vmi_status(kube_api)
    assert (status["nodeName"], status["phase"]) == ("node-1", "Running")
    assert status["migrationState"]["abortRequested"] is True
    assert (status["migrationState"]["completed"], status["migrationState"]["failed"]) == (
        True,
        True,
    )
    assert kubevirt.node_backend("node-3").running_machines() == []
    type_on_serial(kubevirt, "node-1", "echo stayed-$((40+2))\n")
    wait_for(lambda: b"stayed-42" in serial_log(kubevirt, kube_api), "an answer", timeout=60)
