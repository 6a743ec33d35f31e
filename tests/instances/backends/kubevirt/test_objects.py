"""A machine's objects written to the fake cluster: made once, brought up to date on the next
define, taken away together, each refusal a BackendError saying what to fix."""

from dataclasses import replace

import pytest
from kubernetes import client

from instances.backends.base import BackendError
from instances.backends.kubevirt import connection
from instances.backends.kubevirt.connection import ClusterAccess
from instances.backends.kubevirt.manifests import Placement
from instances.backends.kubevirt.objects import NamespaceObjects
from tests.fakes.kubevirt.fixtures import api_client, invalid_sent
from tests.fakes.kubevirt.server import Subject
from tests.fakes.kubevirt.store import RESOURCES
from tests.instances.backends.kubevirt.test_manifests import SHAPES, image_url

SPEC = SHAPES["uefi secure boot, vtpm, subnets"]
PLACEMENT = Placement("zop-web", "Halted", zone="zone-a")


def names(kube_api, plural: str) -> list[str]:
    resource = next(resource for resource in RESOURCES if resource.plural == plural)
    items, _ = kube_api.store.list(resource, "zop-web", lambda body: True)
    return [item["metadata"]["name"] for item in items]


def test_define_makes_the_namespace_networks_machine_and_seed(kube_api):
    objects = NamespaceObjects(api_client(kube_api), "zop-web")
    vm = objects.define(SPEC, PLACEMENT, image_url)
    assert vm["metadata"]["namespace"] == "zop-web"
    assert names(kube_api, "network-attachment-definitions") == ["seg-1", "seg-2"]
    assert names(kube_api, "virtualmachines") == ["i-8"]
    secret = client.CoreV1Api(api_client(kube_api)).read_namespaced_secret(
        "i-8-cloudinit", "zop-web"
    )
    assert secret.metadata.owner_references[0].uid == vm["metadata"]["uid"]


def test_define_again_brings_the_machine_up_to_date(kube_api):
    objects = NamespaceObjects(api_client(kube_api), "zop-web")
    first = objects.define(SPEC, PLACEMENT, image_url)
    second = objects.define(replace(SPEC, memory_mb=8192), PLACEMENT, image_url)
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    assert second["metadata"]["generation"] == 2
    assert second["spec"]["template"]["spec"]["domain"]["memory"] == {"guest": "8192Mi"}


def test_undefine_takes_the_machine_and_what_it_owns_and_tolerates_its_absence(kube_api):
    objects = NamespaceObjects(api_client(kube_api), "zop-web")
    objects.define(SPEC, PLACEMENT, image_url)
    objects.undefine("i-8")
    objects.undefine("i-8")
    assert objects.virtual_machine("i-8") is None
    assert names(kube_api, "secrets") == []


def test_a_refused_object_and_a_missing_rule_are_backend_errors(kube_api):
    objects = NamespaceObjects(api_client(kube_api), "zop-web")
    with pytest.raises(BackendError, match="refused the object: spec.runStrategy"):
        objects.define(SPEC, replace(PLACEMENT, run_strategy=7), image_url)
    assert objects.virtual_machine("i-8") is None
    kube_api.add_token("no-ns", Subject("no-ns", rules=[({"get"}, "", {"namespaces"})]))
    limited = NamespaceObjects(api_client(kube_api, "no-ns"), "zop-other")
    with pytest.raises(BackendError, match='cannot create resource "namespaces"'):
        limited.define(SPEC, PLACEMENT, image_url)


def test_every_object_the_console_sends_validates_against_the_vendored_documents(
    kube_api, tmp_path
):
    """The console's own client, each machine shape written and then rewritten: all it sent
    is collected by the fake, and each test's teardown checks the same of its own traffic."""
    api = connection.api_client(ClusterAccess(kube_api.url, "console-token"), tmp_path)
    objects = NamespaceObjects(api, "zop-web")
    placement = replace(PLACEMENT, kernel_image="registry.local/kernel:1")
    for spec in SHAPES.values():
        objects.define(spec, placement, image_url)
        objects.define(replace(spec, memory_mb=spec.memory_mb * 2), placement, image_url)
    sent = [item for item in kube_api.sent if item.agent == connection.USER_AGENT]
    assert {item.kind for item in sent} == {
        "Namespace", "NetworkAttachmentDefinition", "RoleBinding", "Secret", "VirtualMachine",
    }  # fmt: skip
    assert len(sent) >= 2 * len(SHAPES)
    assert invalid_sent(kube_api) == []
