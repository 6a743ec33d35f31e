"""A link set on a running instance on a cluster goes down and up live, as KubeVirt 1.5+ does
it: the console changes the interface's `state` in the VM's spec, the fake's virt-controller
carries it to the VMI and its virt-handler sets the link of the real QEMU guest, whose driver
loses its carrier; the VMI's status.interfaces says linkState."""

import re
import time

import pytest

from instances.choices import CarrierState, PowerState
from instances.services import network, power
from tests.fakes.kubevirt.fixtures import (
    create,
    guest_of,
    type_on_serial,
    wait_for_prompt,
    wait_for_state,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def objects_of(kube_api, instance, kind: str) -> dict:
    namespace = f"zop-{instance.project.slug}"
    return next(
        body for key, body in kube_api.store.objects.items()
        if key[0].kind == kind and key[1:] == (namespace, instance.machine_id)
    )  # fmt: skip


def guest_carrier(kubevirt, instance, mark: str) -> str:
    """What the guest's driver says of eth0's carrier, read on its serial console."""
    node, machine = guest_of(kubevirt, instance)
    type_on_serial(kubevirt, instance, f"echo {mark}-$(cat /sys/class/net/eth0/carrier)-end\r")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(rf"{mark}-(\d)-end".encode(), node.serial_log(machine).read_bytes())
        if found:
            return found.group(1).decode()
        time.sleep(0.3)
    raise AssertionError(f"the guest never answered {mark}")


def wait_for_carrier(nic, carrier: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while nic.carrier != carrier:
        assert time.monotonic() < deadline, f"{nic.name} never {carrier}"
        time.sleep(0.3)
        nic.refresh_from_db()


def test_a_link_taken_down_on_a_running_cluster_instance_goes_down_in_its_guest(
    celery_worker_process, kube_api, kubevirt, cluster, watching, cluster_lan, operator
):
    instance = create(operator, cluster_lan)
    power.instance_start(instance=instance, actor=operator)
    instance = wait_for_state(instance, PowerState.RUNNING)
    wait_for_prompt(kubevirt, instance)
    assert guest_carrier(kubevirt, instance, "before") == "1"
    nic = instance.nics.get()

    network.nic_set_link(nic=nic, actor=operator, up=False, confirm_primary=True)
    wait_for_carrier(nic, CarrierState.DOWN)
    vm = objects_of(kube_api, instance, "VirtualMachine")
    [interface] = vm["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"]
    assert interface["state"] == "down"  # kept in the VM: the next start has it down too
    vmi = objects_of(kube_api, instance, "VirtualMachineInstance")
    assert vmi["spec"]["domain"]["devices"]["interfaces"][0]["state"] == "down"
    assert vmi["status"]["interfaces"][0]["linkState"] == "down"
    assert guest_carrier(kubevirt, instance, "cable-out") == "0"
    assert wait_for_state(instance, PowerState.RUNNING).power_state == PowerState.RUNNING

    network.nic_set_link(nic=nic, actor=operator, up=True)
    wait_for_carrier(nic, CarrierState.UP)
    vm = objects_of(kube_api, instance, "VirtualMachine")
    assert "state" not in vm["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"][0]
    assert (
        objects_of(kube_api, instance, "VirtualMachineInstance")["status"]["interfaces"][0][
            "linkState"
        ]
        == "up"
    )
    assert guest_carrier(kubevirt, instance, "cable-in") == "1"
