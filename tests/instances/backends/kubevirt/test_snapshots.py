"""Snapshots of instances on a cluster: a VirtualMachineSnapshot that KubeVirt freezes the guest
for through its agent, and a revert through a VirtualMachineRestore of the stopped VM, taken
and reverted by a real Celery worker on the fake, whose disks are a real guest's."""

import time

import pytest
from kubernetes import client

from instances.backends import backend_named
from instances.backends.base import BackendError
from instances.backends.kubevirt.snapshots import consistent
from instances.choices import PowerState, SnapshotState
from instances.errors import ActionRefused
from instances.models import DiskSnapshot, Instance
from instances.services import power, snapshots
from instances.services.instances import DiskRequest
from instances.specs import disk_spec, machine_spec
from tests.fakes.kubevirt import schemas
from tests.fakes.kubevirt.fixtures import (
    BOOT_TIMEOUT,
    api_client,
    create,
    guest_of,
    type_on_serial,
    wait_for_prompt,
    wait_for_state,
)
from tests.fakes.kubevirt.store import Event
from tests.instances.backends.kubevirt.test_connection import ship

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
SNAPSHOT_KINDS = (
    "VirtualMachineSnapshot",
    "VirtualMachineSnapshotContent",
    "VirtualMachineRestore",
)


@pytest.fixture
def shipped_token(kube_api):
    """The console signs in as deploy/kubevirt/rbac.yaml's role: it grants all snapshots take."""
    ship(kube_api, "console-token")


@pytest.fixture
def snapshot_objects(kube_api) -> list[Event]:
    """Every VirtualMachineSnapshot, content and restore as the fake stores it, at each change."""
    seen: list[Event] = []
    kube_api.store.listeners.append(
        lambda event: seen.append(event) if event.resource.kind in SNAPSHOT_KINDS else None
    )
    return seen


def settled(snapshot: DiskSnapshot, timeout: float = 120) -> DiskSnapshot:
    deadline = time.monotonic() + timeout
    while True:
        snapshot.refresh_from_db()
        if not snapshot.in_progress:
            return snapshot
        assert time.monotonic() < deadline, f"snapshot {snapshot.name} is still {snapshot.state}"
        time.sleep(0.2)


def serial_shows(kubevirt, instance: Instance, text: str) -> None:
    node, machine = guest_of(kubevirt, instance)
    deadline = time.monotonic() + 60
    while text.encode() not in node.serial_log(machine).read_bytes():
        assert time.monotonic() < deadline, f"the guest never printed {text}"
        time.sleep(0.2)


def restore_for(kube_api, instance: Instance, snapshot: str) -> dict:
    return {
        "apiVersion": "snapshot.kubevirt.io/v1beta1", "kind": "VirtualMachineRestore",
        "metadata": {"name": "by-hand"},
        "spec": {
            "target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine",
                       "name": instance.machine_id},
            "virtualMachineSnapshotName": snapshot,
        },
    }  # fmt: skip


def test_a_reverted_disk_brings_back_what_the_guest_wrote_before_its_snapshot(
    shipped_token, snapshot_objects, celery_worker_process, kube_api, kubevirt, cluster,
    watching, cluster_lan, operator,
):  # fmt: skip
    instance = create(operator, cluster_lan)
    power.instance_start(instance=instance, actor=operator)
    wait_for_state(instance, PowerState.RUNNING)
    wait_for_prompt(kubevirt, instance)
    type_on_serial(kubevirt, instance, "echo before > /data/note; sync\r")
    root = instance.disks.get(role="root")

    taken = settled(snapshots.disk_snapshot(disk=root, actor=operator, name="s1"))
    assert (taken.state, taken.message, taken.consistent) == (SnapshotState.READY, "", True)
    [vm_snapshot] = [
        body for key, body in kube_api.store.objects.items()
        if key[0].kind == "VirtualMachineSnapshot"
    ]  # fmt: skip
    status = vm_snapshot["status"]
    assert (status["phase"], status["readyToUse"]) == ("Succeeded", True)
    assert status["indications"] == ["Online", "GuestAgent"]
    assert root.device_name in status["snapshotVolumes"]["includedVolumes"]

    type_on_serial(kubevirt, instance, "echo after > /data/note; sync\r")
    with pytest.raises(ActionRefused):  # the console's own rule, before any work
        snapshots.disk_snapshot_revert(snapshot=taken, actor=operator, confirm=True)
    with pytest.raises(BackendError, match="Stop the instance before reverting"):
        backend_named("kubevirt").revert_snapshot(instance.machine_id, root.device_name, "s1")
    custom = client.CustomObjectsApi(api_client(kube_api))
    with pytest.raises(client.ApiException) as refused:  # KubeVirt's webhook, asked directly
        custom.create_namespaced_custom_object(
            "snapshot.kubevirt.io", "v1beta1", f"zop-{instance.project.slug}",
            "virtualmachinerestores", restore_for(kube_api, instance, vm_snapshot["metadata"]["name"]),
        )  # fmt: skip
    assert refused.value.status == 422
    assert f'VirtualMachine \\"{instance.machine_id}\\" is not stopped' in refused.value.body

    power.instance_shutdown(instance=instance, actor=operator)
    wait_for_state(instance, PowerState.STOPPED, timeout=60)
    taken = DiskSnapshot.objects.select_related("disk__instance").get(pk=taken.pk)
    snapshots.disk_snapshot_revert(snapshot=taken, actor=operator, confirm=True)
    reverted = settled(taken)
    assert (reverted.state, reverted.message) == (SnapshotState.READY, "")
    assert not any(key[0].kind == "VirtualMachineRestore" for key in kube_api.store.objects)

    power.instance_start(instance=Instance.objects.get(pk=instance.pk), actor=operator)
    wait_for_state(instance, PowerState.RUNNING, timeout=BOOT_TIMEOUT)
    wait_for_prompt(kubevirt, instance)
    type_on_serial(kubevirt, instance, 'echo "N$(cat /data/note)N"\r')
    serial_shows(kubevirt, instance, "NbeforeN")

    snapshots.disk_snapshot_delete(snapshot=reverted, actor=operator)
    deadline = time.monotonic() + 60
    while DiskSnapshot.objects.filter(pk=taken.pk).exists():
        assert time.monotonic() < deadline, "the snapshot was never deleted"
        time.sleep(0.2)
    assert not any(
        key[0].kind in ("VirtualMachineSnapshot", "VirtualMachineSnapshotContent")
        for key in kube_api.store.objects
    )
    kinds = {event.resource.kind for event in snapshot_objects}
    assert kinds == set(SNAPSHOT_KINDS)
    for event in snapshot_objects:  # the fake's own objects are as KubeVirt's documents say
        verdict = schemas.validate(event.resource.kind, event.object)
        assert (verdict.causes, verdict.unknown) == ([], []), event.object["metadata"]["name"]


def test_a_stopped_vms_snapshots_are_offline_and_a_revert_never_brings_back_other_disks(
    celery_worker_process, kube_api, kubevirt, cluster, cluster_lan, operator
):
    instance = create(operator, cluster_lan, disks=[DiskRequest(size_gb=1)])
    backend = backend_named("kubevirt")
    backend.define(machine_spec(instance))
    root, data = (disk_spec(disk) for disk in instance.disks.order_by("pk"))
    machine = instance.machine_id

    assert backend.snapshot_disks(machine, [root, data], "both") is False  # offline: no freeze
    assert backend.snapshot_disks(machine, [root], "root-only") is False
    with pytest.raises(BackendError, match=f"this snapshot also holds {data.name}"):
        backend.revert_snapshot(machine, root.name, "root-only")
    assert backend.revert_snapshot(machine, root.name, "both") == 1

    backend.delete_snapshot(machine, root.name, "both")  # data still keeps it, alone
    with pytest.raises(BackendError, match=f"this snapshot also holds {root.name}"):
        backend.revert_snapshot(machine, data.name, "both")
    with pytest.raises(BackendError, match=f"{root.name} has no snapshot called both"):
        backend.revert_snapshot(machine, root.name, "both")
    backend.delete_snapshot(machine, data.name, "both")
    backend.delete_snapshot(machine, root.name, "root-only")
    backend.delete_snapshot(machine, root.name, "root-only")  # gone already: fine
    assert not any(
        key[0].kind in ("VirtualMachineSnapshot", "VirtualMachineSnapshotContent")
        for key in kube_api.store.objects
    )


def test_a_snapshot_the_cluster_fails_says_why_in_its_words(
    celery_worker_process, kube_api, kubevirt, cluster, cluster_lan, operator
):
    instance = create(operator, cluster_lan)
    backend = backend_named("kubevirt")
    backend.define(machine_spec(instance))
    backend.undefine(instance.machine_id)  # KubeVirt's controller finds no VM to snapshot
    root = disk_spec(instance.disks.get())
    with pytest.raises(BackendError) as failed:
        backend.snapshot_disks(instance.machine_id, [root], "s1")
    assert failed.value.message == (
        f'The cluster could not take the snapshot: VirtualMachine "{instance.machine_id}" '
        "does not exist."
    )


@pytest.mark.parametrize(
    "indications, frozen",
    [(["Online", "GuestAgent"], True), (["Online", "NoGuestAgent"], False),
     (["Online", "QuiesceFailed"], False), ([], False)],
)  # fmt: skip
def test_only_kubevirts_guest_agent_indication_marks_a_snapshot_consistent(indications, frozen):
    status = {"sourceIndications": [{"indication": i, "message": ""} for i in indications]}
    assert consistent(status) is frozen
