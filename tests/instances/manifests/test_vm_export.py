"""Exporting an instance as KubeVirt objects: each validates against the vendored OpenAPI
documents, the fake API server takes them through the `kubernetes` client, and applying the
export back changes nothing."""

import pytest
import yaml
from kubernetes import client

from instances.choices import DiskRole, ImageKind
from instances.manifests import ManifestInvalid, manifest_apply
from instances.manifests.vm_export import instance_manifest
from instances.models import SSHKey
from instances.services import network
from instances.services.instances import DiskRequest, NicRequest, instance_create
from tests.factories import ImageFactory, demo_image, instance_request
from tests.fakes.kubevirt import schemas
from tests.fakes.kubevirt.fixtures import api_client, create

pytestmark = pytest.mark.django_db

PUBLIC_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGz3v0uJ0rBqJ6n0cLxW2g8mB3m4yJ3wF0v9rS1t2u3v laptop"
)


def kubectl_apply(kube_api, objects: list[dict]) -> None:
    """What `kubectl apply -f` sends for a new object: a create with strict field validation."""
    api = api_client(kube_api)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    for body in objects:
        namespace = body["metadata"]["namespace"]
        if body["kind"] == "Secret":
            core.create_namespaced_secret(namespace, body, field_validation="Strict")
            continue
        group, version = body["apiVersion"].split("/")
        plural = {
            "VirtualMachine": "virtualmachines",
            "NetworkAttachmentDefinition": "network-attachment-definitions",
        }[body["kind"]]
        custom.create_namespaced_custom_object(
            group, version, namespace, plural, body, field_validation="Strict"
        )


@pytest.fixture
def instance(operator, owner, cluster, cluster_lan):
    return create(operator, cluster_lan, run_strategy="Manual", vcpus=2, memory_gb=2)


def test_the_export_validates_applies_and_comes_back_unchanged(instance, owner, kube_api):
    text = instance_manifest(instance, redact=False)
    objects = list(yaml.safe_load_all(text))
    assert [body["kind"] for body in objects] == [
        "NetworkAttachmentDefinition", "Secret", "VirtualMachine",
    ]  # fmt: skip
    for body in objects:
        verdict = schemas.validate(body["kind"], body)
        assert (verdict.causes, verdict.unknown) == ([], []), body["kind"]
    vm = objects[-1]
    assert vm["metadata"]["name"] == "web"
    assert vm["spec"]["runStrategy"] == "Manual"
    domain = vm["spec"]["template"]["spec"]["domain"]
    assert domain["cpu"] == {"sockets": 2, "cores": 1, "threads": 1}
    assert domain["memory"]["guest"] == "2048Mi"
    assert domain["devices"]["interfaces"][0]["macAddress"] == instance.nics.get().mac
    assert objects[1]["stringData"]["userdata"].startswith("#cloud-config")

    namespace = vm["metadata"]["namespace"]
    client.CoreV1Api(api_client(kube_api)).create_namespace({"metadata": {"name": namespace}})
    kubectl_apply(kube_api, objects)
    refused = [sent for sent in kube_api.sent if sent.verdict.causes or sent.verdict.unknown]
    assert refused == []
    stored = client.CustomObjectsApi(api_client(kube_api)).get_namespaced_custom_object(
        "kubevirt.io", "v1", namespace, "virtualmachines", "web"
    )
    assert stored["spec"]["template"]["spec"] == vm["spec"]["template"]["spec"]

    plans = manifest_apply(sources=[("web.yaml", text)], actor=owner, dry_run=True)
    assert [plan.diff() for plan in plans] == [
        [f"  instance {instance.project.slug}/web (unchanged)"]
    ]


def test_operators_get_the_credentials_hidden_and_apply_refuses_that(instance, operator):
    text = instance_manifest(instance, redact=True)
    secret = list(yaml.safe_load_all(text))[1]
    assert instance.initial_password not in text
    assert secret["metadata"]["annotations"] == {"zopday.io/redacted": "true"}
    with pytest.raises(ManifestInvalid) as refused:
        manifest_apply(sources=[("web.yaml", text)], actor=operator, dry_run=True)
    lines = text.splitlines()
    marked = refused.value.problems
    assert len(marked) == 2  # on the VirtualMachine and on its Secret, nothing else
    for problem in marked:
        assert problem.path == "metadata.annotations.zopday.io/redacted"
        line = int(problem.where.rsplit(":", 1)[1])
        assert "zopday.io/redacted" in lines[line - 1]
        assert "credentials hidden" in problem.message


def test_every_field_survives_export_then_apply(operator, owner, cluster, cluster_lan, kube_api):
    """UEFI with Secure Boot, persistent EFI and vTPM, a CPU topology, custom user data and a
    key, a SATA disk and an automatic one, a second interface (e1000, link down): unchanged."""
    key = SSHKey.objects.create(project=cluster_lan.project, name="laptop", public_key=PUBLIC_KEY)
    request = instance_request(
        cluster_lan, image=demo_image(), name="db", cluster="lab", run_strategy="Halted",
        vcpus=2, sockets=1, cores=2, threads=1, bootloader="uefi", secure_boot=True,
        persistent_efi=True, vtpm=True, user_data_mode="custom",
        custom_user_data="#cloud-config\nhostname: db\n", ssh_keys=[key],
        disks=[DiskRequest(size_gb=3, name="db-data", bus="sata"), DiskRequest(size_gb=2)],
        nics=[NicRequest(cluster_lan, ipv4="10.91.0.20"), NicRequest(cluster_lan, model="e1000")],
    )  # fmt: skip
    instance = instance_create(project=cluster_lan.project, actor=operator, request=request)
    network.nic_set_link(nic=instance.nics.get(index=1), actor=operator, up=False)
    text = instance_manifest(instance, redact=False)
    objects = list(yaml.safe_load_all(text))
    for body in objects:
        verdict = schemas.validate(body["kind"], body)
        assert (verdict.causes, verdict.unknown) == ([], []), body["kind"]
    domain = objects[-1]["spec"]["template"]["spec"]["domain"]
    assert domain["firmware"]["bootloader"] == {"efi": {"secureBoot": True, "persistent": True}}
    assert domain["devices"]["tpm"] == {"persistent": True}
    assert domain["devices"]["interfaces"][1]["state"] == "down"
    assert domain["devices"]["interfaces"][1]["model"] == "e1000"
    client.CoreV1Api(api_client(kube_api)).create_namespace(
        {"metadata": {"name": objects[-1]["metadata"]["namespace"]}}
    )
    kubectl_apply(kube_api, objects)
    assert [sent for sent in kube_api.sent if sent.verdict.causes or sent.verdict.unknown] == []

    plans = manifest_apply(sources=[("db.yaml", text)], actor=owner, dry_run=True)
    assert [plan.diff() for plan in plans] == [
        [f"  instance {instance.project.slug}/db (unchanged)"]
    ]


def test_a_cdrom_exports_with_its_iso_named_on_its_data_volume(operator, cluster, cluster_lan):
    iso = ImageFactory(kind=ImageKind.ISO, name="tools", path="tools.iso")
    request = instance_request(
        cluster_lan, image=demo_image(), name="cd", cluster="lab",
        disks=[DiskRequest(size_gb=0, role=DiskRole.CDROM, name="cd-tools", image=iso)],
    )  # fmt: skip
    instance = instance_create(project=cluster_lan.project, actor=operator, request=request)
    vm = list(yaml.safe_load_all(instance_manifest(instance, redact=False)))[-1]
    volume = next(v for v in vm["spec"]["template"]["spec"]["volumes"] if v["name"] == "cd-tools")
    template = next(
        t for t in vm["spec"]["dataVolumeTemplates"]
        if t["metadata"]["name"] == volume["dataVolume"]["name"]
    )  # fmt: skip
    assert template["metadata"]["annotations"] == {"zopday.io/image": "tools"}
    assert template["spec"]["source"]["http"]["url"].endswith("/tools")


def test_a_disk_cloned_from_a_cluster_volume_exports_and_applies_unchanged(
    operator, owner, cluster, cluster_lan
):
    golden = ImageFactory(kind=ImageKind.PVC, name="golden", path="", reference="golden/demo")
    request = instance_request(cluster_lan, image=golden, name="gd", cluster="lab")
    instance = instance_create(project=cluster_lan.project, actor=operator, request=request)
    text = instance_manifest(instance, redact=False)
    vm = list(yaml.safe_load_all(text))[-1]
    sources = [template["spec"]["source"] for template in vm["spec"]["dataVolumeTemplates"]]
    assert sources == [{"pvc": {"namespace": "golden", "name": "demo"}}]
    plans = manifest_apply(sources=[("gd.yaml", text)], actor=owner, dry_run=True)
    assert [plan.diff() for plan in plans] == [
        [f"  instance {instance.project.slug}/gd (unchanged)"]
    ]
