"""Disks cloned from a cluster's own volume (a golden image's PVC): KubeVirt instances boot from
a DataVolume whose source is that PVC, cloned by the fake's CDI; a volume that is not there is
the instance's message; this console's hosts refuse such an image at its field."""

import time

import pytest
from django.core.exceptions import ValidationError
from kubernetes import client

from instances.choices import ImageKind, PowerState
from instances.models import Image, Instance
from instances.services import power
from tests import factories
from tests.fakes.kubevirt.fixtures import api_client, wait_for_prompt, wait_for_state

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
CDI = ("cdi.kubevirt.io", "v1beta1")


def golden_volume(kube_api, reference: str) -> None:
    """golden/demo: a DataVolume an administrator imported once from a registry, and its PVC."""
    api = api_client(kube_api)
    client.CoreV1Api(api).create_namespace({"metadata": {"name": "golden"}})
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(*CDI, "golden", "datavolumes", {
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": "demo"},
        "spec": {"source": {"registry": {"url": f"docker://{reference}"}},
                 "storage": {"resources": {"requests": {"storage": "1Gi"}}}},
    })  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        volume = custom.get_namespaced_custom_object(*CDI, "golden", "datavolumes", "demo")
        if volume.get("status", {}).get("phase") == "Succeeded":
            return
        assert time.monotonic() < deadline, f"the golden volume never imported: {volume}"
        time.sleep(0.2)


def create_from(cluster_lan, operator, image: Image, **fields) -> Instance:
    return factories.demo_instance(
        actor=operator, image=image, subnet=cluster_lan, name="web", ip="10.91.0.10", **fields
    )


def test_an_instance_boots_from_a_clone_of_a_golden_volume(
    celery_worker_process, kube_api, kubevirt, cluster, watching, cluster_lan, operator,
    demo_container_disk,
):  # fmt: skip
    golden_volume(kube_api, demo_container_disk[0])
    image = Image.objects.create(name="golden-demo", kind=ImageKind.PVC, reference="golden/demo")
    instance = create_from(cluster_lan, operator, image, cluster="lab")
    power.instance_start(instance=instance, actor=operator)
    wait_for_state(instance, PowerState.RUNNING)
    wait_for_prompt(kubevirt, instance)  # the demo guest, booted from the clone
    vm = next(
        body for (kind, _, name), body in kube_api.store.objects.items()
        if kind.kind == "VirtualMachine" and name == instance.machine_id
    )  # fmt: skip
    sources = [template["spec"]["source"] for template in vm["spec"]["dataVolumeTemplates"]]
    assert {"pvc": {"namespace": "golden", "name": "demo"}} in sources
    power.instance_force_stop(instance=instance, actor=operator)
    wait_for_state(instance, PowerState.STOPPED)


def test_a_volume_that_is_not_there_is_the_instances_message(
    celery_worker_process, kube_api, kubevirt, cluster, watching, cluster_lan, operator
):
    image = Image.objects.create(name="gone", kind=ImageKind.PVC, reference="golden/gone")
    instance = create_from(cluster_lan, operator, image, cluster="lab")
    power.instance_start(instance=instance, actor=operator)
    instance = wait_for_state(instance, PowerState.FAILED)
    assert "The source PVC golden/gone doesn't exist" in instance.power_message
    vm = next(
        body for (kind, _, name), body in kube_api.store.objects.items()
        if kind.kind == "VirtualMachine" and name == instance.machine_id
    )  # fmt: skip
    assert vm["spec"]["runStrategy"] == "Halted"  # no start left pending


def test_this_consoles_hosts_refuse_a_cluster_volume_at_its_field(project, operator, subnet):
    image = Image.objects.create(name="golden-demo", kind=ImageKind.PVC, reference="golden/demo")
    with pytest.raises(ValidationError) as refused:
        factories.demo_instance(actor=operator, image=image, subnet=subnet, name="x", ip="")
    assert refused.value.message_dict["root_image"] == [
        "golden-demo is a volume of a cluster: run the instance on a cluster, or choose another "
        "image."
    ]


@pytest.mark.parametrize("reference", ["golden", "Golden/demo", "golden/demo/extra", "/demo"])
def test_a_cluster_volume_is_named_namespace_slash_name(reference):
    with pytest.raises(ValidationError) as refused:
        Image(name="v", kind=ImageKind.PVC, reference=reference).full_clean()
    assert refused.value.message_dict["reference"] == [
        "Give the volume as namespace/name (such as golden/debian-12): each a DNS label."
    ]
