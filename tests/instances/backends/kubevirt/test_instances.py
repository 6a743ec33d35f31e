"""Instances on a cluster: created through the services, powered by a real Celery worker through
KubeVirt's subresources on the fake, their state kept true by the cluster's watch while
KubeVirt applies the run strategies to real QEMU guests."""

import socket
import time
from collections.abc import Iterator

import pytest

from instances.choices import LastExit, PowerState, RunStrategy
from instances.models import Cluster, Instance
from instances.services import power
from instances.services.cluster_watch import ClusterWatch, watch_cluster
from instances.services.clusters import cluster_check
from tests import factories
from tests.factories import SubnetFactory
from tests.instances.backends.kubevirt.conftest import KERNEL_IMAGE

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BOOT_TIMEOUT = 180


@pytest.fixture
def cluster(kube_api, kubevirt) -> Cluster:
    cluster = Cluster(name="lab", api_url=kube_api.url, kernel_image=KERNEL_IMAGE)
    cluster.token = "console-token"
    cluster.save()
    assert cluster_check(cluster) == ""
    return cluster


@pytest.fixture
def watching(cluster, tmp_path) -> Iterator[ClusterWatch]:
    watcher = watch_cluster(cluster, tmp_path)
    yield watcher
    watcher.stop()


@pytest.fixture
def lan(project):
    return SubnetFactory(project=project, name="lan", zone="zone-a", cidr_v4="10.91.0.0/24",
                         gateway="10.91.0.1", dns_resolvers="")  # fmt: skip


def create(operator, lan, **fields) -> Instance:
    return factories.demo_instance(
        actor=operator, image=factories.demo_image(), subnet=lan, name="web", ip="10.91.0.10",
        cluster="lab", **fields,
    )  # fmt: skip


def wait_for_state(instance: Instance, state: str, timeout: float = BOOT_TIMEOUT) -> Instance:
    deadline = time.monotonic() + timeout
    while True:
        instance.refresh_from_db()
        if instance.power_state == state:
            return instance
        assert time.monotonic() < deadline, (
            f"{instance.name} never {state} (it is {instance.power_state}: "
            f"{instance.power_message})"
        )
        time.sleep(0.2)


def guest_of(kubevirt, instance: Instance):
    """The node's QEMU backend that runs the instance's VMI, and the machine's id there."""
    node = kubevirt.node_backend("node-1")  # the node of zone-a
    return node, f"zop-{instance.project.slug}-{instance.machine_id}"


def wait_for_prompt(kubevirt, instance: Instance, count: int = 1) -> None:
    node, machine = guest_of(kubevirt, instance)
    prompt = f"root@{instance.name}:/# ".encode()
    deadline = time.monotonic() + BOOT_TIMEOUT
    while True:
        log = node.serial_log(machine)
        if log.exists() and log.read_bytes().count(prompt) >= count:
            return
        assert time.monotonic() < deadline, f"never at the prompt of {instance.name}"
        time.sleep(0.2)


def type_on_serial(kubevirt, instance: Instance, text: str) -> None:
    node, machine = guest_of(kubevirt, instance)
    with socket.socket(socket.AF_UNIX) as console:
        console.connect(str(node.console_socket(machine, "serial")))
        console.sendall(text.encode())
        time.sleep(0.3)  # the UART drains before the socket closes


def vm_of(kube_api, instance: Instance) -> dict:
    namespace = f"zop-{instance.project.slug}"
    return kube_api.store.objects[
        next(key for key in kube_api.store.objects
             if key[0].kind == "VirtualMachine" and key[1:] == (namespace, instance.machine_id))
    ]  # fmt: skip


def vmi_of(kube_api, instance: Instance) -> dict | None:
    namespace = f"zop-{instance.project.slug}"
    return next(
        (body for key, body in kube_api.store.objects.items()
         if key[0].kind == "VirtualMachineInstance" and key[1:] == (namespace, instance.machine_id)),
        None,
    )  # fmt: skip


def test_an_instance_on_a_cluster_starts_reaches_its_prompt_and_shuts_down(
    celery_worker_process, kube_api, kubevirt, cluster, watching, lan, operator
):
    instance = create(operator, lan)
    assert (instance.backend, instance.cluster, instance.host) == ("kubevirt", cluster, "")
    power.instance_start(instance=instance, actor=operator)
    wait_for_state(instance, PowerState.RUNNING)
    assert vm_of(kube_api, instance)["spec"]["runStrategy"] == "Manual"
    wait_for_prompt(kubevirt, instance)
    power.instance_shutdown(instance=instance, actor=operator)
    instance = wait_for_state(instance, PowerState.STOPPED, timeout=60)
    assert instance.last_exit == LastExit.REQUESTED
    kubevirt.settled()
    assert vm_of(kube_api, instance)["status"]["printableStatus"] == "Stopped"


def test_kubevirt_reruns_a_guest_that_powered_off_under_always_and_the_watch_sees_it(
    celery_worker_process, kube_api, kubevirt, cluster, watching, lan, operator
):
    instance = create(operator, lan, run_strategy=RunStrategy.ALWAYS)  # starts on create
    wait_for_state(instance, PowerState.RUNNING)
    wait_for_prompt(kubevirt, instance)
    first = vmi_of(kube_api, instance)["metadata"]["uid"]
    type_on_serial(kubevirt, instance, "poweroff -f\r")
    deadline = time.monotonic() + BOOT_TIMEOUT
    while not ((vmi := vmi_of(kube_api, instance)) and vmi["metadata"]["uid"] != first
               and vmi.get("status", {}).get("phase") == "Running"):  # fmt: skip
        assert time.monotonic() < deadline, "KubeVirt never ran it again"
        time.sleep(0.2)
    kubevirt.settled()
    instance = wait_for_state(instance, PowerState.RUNNING)
    assert instance.run_strategy == RunStrategy.ALWAYS


def test_a_guest_power_off_under_rerun_on_failure_leaves_it_stopped(
    celery_worker_process, kube_api, kubevirt, cluster, watching, lan, operator
):
    instance = create(operator, lan, run_strategy=RunStrategy.RERUN_ON_FAILURE)
    wait_for_state(instance, PowerState.RUNNING)
    wait_for_prompt(kubevirt, instance)
    type_on_serial(kubevirt, instance, "poweroff -f\r")
    instance = wait_for_state(instance, PowerState.STOPPED, timeout=60)
    assert instance.last_exit == LastExit.GUEST_POWEROFF
    assert instance.power_message == "The guest powered itself off."


def test_a_size_no_node_of_the_zone_has_is_refused_at_its_field(cluster, lan, operator):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as refused:
        create(operator, lan, memory_gb=16)
    assert refused.value.message_dict["memory_gb"] == [
        "No node of lab in zone-a has 16 GB for a machine: the most one gives is 8 GB."
    ]
    assert not Instance.objects.exists()


def test_a_zone_the_cluster_lacks_and_an_unknown_cluster_are_refused_at_their_fields(
    cluster, lan, operator, project
):
    from django.core.exceptions import ValidationError

    local = SubnetFactory(project=project, name="local", zone="local-1a",
                          cidr_v4="10.92.0.0/24", gateway="10.92.0.1")  # fmt: skip
    with pytest.raises(ValidationError) as refused:
        factories.demo_instance(
            actor=operator, image=factories.demo_image(), subnet=local, name="web",
            ip="10.92.0.10", cluster="lab",
        )  # fmt: skip
    assert refused.value.message_dict["zone"] == ["Choose one of lab's zones: zone-a, zone-b."]
    with pytest.raises(ValidationError) as refused:
        factories.demo_instance(
            actor=operator, image=factories.demo_image("demo2"), subnet=lan, name="web",
            ip="10.91.0.10", cluster="nowhere",
        )  # fmt: skip
    assert refused.value.message_dict["cluster"] == [
        "Choose this console's hosts or one of the clusters: lab."
    ]
    assert not Instance.objects.exists()
