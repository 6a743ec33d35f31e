"""The fake's virt-controller against real QEMU guests: a VirtualMachine's runStrategy and the
start/stop subresources decide whether its instance runs, as KubeVirt's do."""

import socket
import time
from dataclasses import replace
from pathlib import Path

import pytest
from kubernetes import client

from instances.backends.base import CloudInitSeed, DiskSpec, FirmwareSpec, MachineSpec, NicSpec
from instances.backends.kubevirt.connection import subresource
from instances.backends.kubevirt.manifests import Placement
from instances.backends.kubevirt.objects import NamespaceObjects
from tests.fakes.kubevirt.fixtures import KERNEL_IMAGE, api_client

pytestmark = pytest.mark.integration

BOOT_TIMEOUT = 180
NAMESPACE = "zop-web"
VMS = ("kubevirt.io", "v1", NAMESPACE, "virtualmachines")
SPEC = MachineSpec(
    "i-1", "web", 1, 1, 1, 1, 256,
    disks=(DiskSpec("disk-1", "root", "virtio", 1, boot_order=1),),
    nics=(NicSpec("eth0", "02:00:00:00:00:01", "virtio"),),
    seed=CloudInitSeed("", "#cloud-config\n"),
    kernel=Path("vmlinuz"), initrd=Path("initrd.img"), kernel_cmdline="console=ttyS0",
)  # fmt: skip


def placement(strategy: str) -> Placement:
    return Placement(NAMESPACE, strategy, zone="zone-a", kernel_image=KERNEL_IMAGE)


def act(kube_api, action: str, body: dict | None = None) -> None:
    subresource(api_client(kube_api), NAMESPACE, "virtualmachines", "i-1", action, body or {})


def vm_state(kube_api) -> tuple[str, str]:
    """(runStrategy, printableStatus) as the API serves them."""
    store = kube_api.store
    vm = next(body for (kind, _, _), body in store.objects.items() if kind.kind == "VirtualMachine")
    return vm["spec"]["runStrategy"], vm.get("status", {}).get("printableStatus", "")


def wait_for(condition, what: str, timeout: float = BOOT_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.1)


def serial_log(kubevirt) -> bytes:
    backend = kubevirt.node_backend("node-1")
    path = backend.serial_log(f"{NAMESPACE}-i-1")
    return path.read_bytes() if path.exists() else b""


def type_on_serial(kubevirt, text: str) -> None:
    backend = kubevirt.node_backend("node-1")
    with socket.socket(socket.AF_UNIX) as console:
        console.connect(str(backend.console_socket(f"{NAMESPACE}-i-1", "serial")))
        console.sendall(text.encode())
        time.sleep(0.3)  # let the UART drain before the socket closes


def test_always_runs_the_guest_on_a_node_of_its_zone_and_stop_halts_it(kube_api, kubevirt):
    objects = NamespaceObjects(api_client(kube_api), NAMESPACE)
    objects.define(SPEC, placement("Always"), lambda disk: "")
    wait_for(lambda: vm_state(kube_api)[1] == "Running", "Running")
    vmi = next(
        body for (kind, _, _), body in kube_api.store.objects.items()
        if kind.kind == "VirtualMachineInstance"
    )  # fmt: skip
    assert vmi["status"]["nodeName"] == "node-1"  # the node of zone-a
    wait_for(lambda: b"root@i-1:/# " in serial_log(kubevirt), "at the shell prompt")
    act(kube_api, "stop")
    assert vm_state(kube_api)[0] == "Halted"
    wait_for(lambda: vm_state(kube_api) == ("Halted", "Stopped"), "Stopped", timeout=60)
    assert kubevirt.node_backend("node-1").running_machines() == []


def test_a_guest_power_off_is_rerun_under_always_but_not_under_rerun_on_failure(kube_api, kubevirt):
    objects = NamespaceObjects(api_client(kube_api), NAMESPACE)
    objects.define(SPEC, placement("RerunOnFailure"), lambda disk: "")
    wait_for(lambda: b"root@i-1:/# " in serial_log(kubevirt), "at the shell prompt")
    type_on_serial(kubevirt, "poweroff -f\r")
    wait_for(lambda: vm_state(kube_api)[1] == "Stopped", "Stopped", timeout=60)
    kubevirt.settled()  # it has seen the Succeeded VMI and decided
    assert vm_state(kube_api) == ("RerunOnFailure", "Stopped")
    act(kube_api, "start")
    wait_for(lambda: vm_state(kube_api)[1] == "Running", "Running again")


@pytest.mark.parametrize("persistent", [False, True], ids=["tpm {}", "persistent tpm"])
def test_a_tpm_is_made_anew_for_each_vmi_unless_persistent(kube_api, kubevirt, persistent):
    custom = client.CustomObjectsApi(api_client(kube_api))
    objects = NamespaceObjects(api_client(kube_api), NAMESPACE)
    objects.define(replace(SPEC, firmware=FirmwareSpec(vtpm=True)), placement("Halted"), str)
    vm = custom.get_namespaced_custom_object(*VMS, "i-1")
    vm["spec"]["template"]["spec"]["domain"]["devices"]["tpm"] = (
        {"persistent": True} if persistent else {}
    )
    custom.replace_namespaced_custom_object(*VMS, "i-1", vm)
    state = kubevirt.root / "node-1" / f"{NAMESPACE}-i-1" / "swtpm"
    act(kube_api, "start")
    wait_for(lambda: vm_state(kube_api)[1] == "Running", "Running")
    assert state.is_dir()  # swtpm runs beside the guest
    (state / "written-by-the-guest").touch()
    act(kube_api, "stop", {"gracePeriod": 0})
    wait_for(lambda: vm_state(kube_api)[1] == "Stopped", "Stopped", timeout=60)
    act(kube_api, "start")
    wait_for(lambda: vm_state(kube_api)[1] == "Running", "Running again")
    assert (state / "written-by-the-guest").exists() is persistent
    act(kube_api, "stop", {"gracePeriod": 0})
    wait_for(lambda: vm_state(kube_api)[1] == "Stopped", "Stopped", timeout=60)
