"""Instances on a cluster: created through the services, powered by a real Celery worker through
KubeVirt's subresources on the fake, their state kept true by the cluster's watch while
KubeVirt applies the run strategies to real QEMU guests."""

import time

import pytest

from instances.choices import LastExit, PowerState, RunStrategy
from instances.models import AuditEvent, Instance
from instances.services import power
from tests import factories
from tests.factories import SubnetFactory
from tests.fakes.kubevirt.fixtures import (
    BOOT_TIMEOUT,
    create,
    type_on_serial,
    wait_for_prompt,
    wait_for_state,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


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
    celery_worker_process, kube_api, kubevirt, cluster, watching, cluster_lan, operator
):
    instance = create(operator, cluster_lan)
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
    celery_worker_process, kube_api, kubevirt, cluster, watching, cluster_lan, operator
):
    instance = create(operator, cluster_lan, run_strategy=RunStrategy.ALWAYS)  # starts on create
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
    celery_worker_process, kube_api, kubevirt, cluster, watching, cluster_lan, operator
):
    instance = create(operator, cluster_lan, run_strategy=RunStrategy.RERUN_ON_FAILURE)
    wait_for_state(instance, PowerState.RUNNING)
    wait_for_prompt(kubevirt, instance)
    type_on_serial(kubevirt, instance, "poweroff -f\r")
    instance = wait_for_state(instance, PowerState.STOPPED, timeout=60)
    assert instance.last_exit == LastExit.GUEST_POWEROFF
    event = AuditEvent.objects.get(action="instance.stopped", target_id=str(instance.pk))
    assert event.message == "Guest powered off; run strategy RerunOnFailure."


def test_a_size_no_node_of_the_zone_has_is_refused_at_its_field(cluster, cluster_lan, operator):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as refused:
        create(operator, cluster_lan, memory_gb=16)
    assert refused.value.message_dict["memory_gb"] == [
        "No node of lab in zone-a has 16 GB for a machine: the most one gives is 8 GB."
    ]
    assert not Instance.objects.exists()


def test_a_zone_the_cluster_lacks_and_an_unknown_cluster_are_refused_at_their_fields(
    cluster, cluster_lan, operator, project
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
            actor=operator, image=factories.demo_image("demo2"), subnet=cluster_lan, name="web",
            ip="10.91.0.10", cluster="nowhere",
        )  # fmt: skip
    assert refused.value.message_dict["cluster"] == [
        "Choose this console's hosts or one of the clusters: lab."
    ]
    assert not Instance.objects.exists()
