"""Creating instances from manifests: the acting user's role, references by name or id."""

import pytest

from instances.choices import PowerState
from instances.models import AuditEvent, Disk, Image, Instance
from tests.factories import ImageFactory
from tests.instances.manifests.conftest import MANIFEST

pytestmark = pytest.mark.django_db


def test_it_creates_a_missing_instance_with_its_disks_and_nics(apply, operator):
    output = apply(MANIFEST)
    assert output.splitlines() == [
        "+ instance alpha/web-1 (create)",
        "    + disk web-1-root 2 GB (root, image demo)",
        "    + disk web-1-data 10 GB (secondary)",
        "    + nic eth0 on backend",
        "Applied: 1 created, 0 changed, 0 unchanged.",
    ]
    instance = Instance.objects.get(name="web-1")
    assert (instance.project.slug, instance.zone, instance.run_strategy) == (
        "alpha",
        "local-1a",
        "Manual",
    )
    assert sorted(instance.disks.values_list("name", "role", "size_gb")) == [
        ("web-1-data", "secondary", 10),
        ("web-1-root", "root", 2),
    ]
    assert [(nic.name, nic.ipv4) for nic in instance.nics.all()] == [("eth0", "10.20.0.2")]
    event = AuditEvent.objects.get(action="instance.create")
    assert (event.actor, event.target_repr) == (operator, "web-1")


def test_a_starting_run_strategy_queues_the_start_after_the_commit(
    apply, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        apply(MANIFEST.replace("  zone:", "  run_strategy: Always\n  zone:"))
    assert Instance.objects.get().power_state == PowerState.STARTING
    assert len(callbacks) == 1


def test_references_may_be_ids_as_in_the_api(apply, subnet, image):
    manifest = MANIFEST.replace("root_image: demo", f"root_image: {image.pk}").replace(
        "subnet: backend", f"subnet: {subnet.pk}"
    )
    apply(manifest)
    assert Instance.objects.get().nics.get().subnet == subnet


def test_an_image_of_the_project_is_found_by_name(apply, project):
    ImageFactory(name="golden", project=project)
    apply(MANIFEST.replace("root_image: demo", "root_image: golden"))
    assert Disk.objects.get(role="root").image == Image.objects.get(name="golden", project=project)


def test_an_owner_may_apply_too(apply, owner):
    apply(MANIFEST, user="owner")
    assert Instance.objects.get().name == "web-1"


def test_a_viewer_is_refused_with_the_apis_message(refused, viewer):
    refusal = refused(MANIFEST, user="viewer")
    assert refusal.problems == [
        "instance.yaml:2 (instance web-1): project: This needs the operator role in Alpha."
    ]
    assert refusal.error == "Nothing was applied: 1 problem."
    assert not Instance.objects.exists()


def test_an_outsider_does_not_see_the_project(refused, outsider):
    refusal = refused(MANIFEST, user="outsider")
    assert refusal.problems == ["instance.yaml:2 (instance web-1): project: No such project."]


def test_a_missing_project_is_named(refused):
    refusal = refused(MANIFEST.replace("project: alpha", "project: nowhere"))
    assert refusal.problems == ["instance.yaml:2 (instance web-1): project: No such project."]


def test_unknown_names_get_the_apis_messages_for_unknown_ids(refused, other_project):
    ImageFactory(name="theirs", project=other_project)
    foreign = Image.objects.get(name="theirs")
    manifest = (
        MANIFEST.replace("root_image: demo", "root_image: theirs")
        .replace("subnet: backend", "subnet: frontend")
        .replace("size_gb: 10}", f"size_gb: 10, image: {foreign.pk}}}")
        .replace("  disks:", "  ssh_keys: [laptop]\n  disks:")
    )
    refusal = refused(manifest)
    assert refusal.problems == [
        "instance.yaml:6 (instance web-1): root_image: Choose an image of this project or a shared one.",
        "instance.yaml:8 (instance web-1): ssh_keys: Choose SSH keys of this project.",
        "instance.yaml:12 (instance web-1): nics-0-subnet: Choose a subnet of this project.",
    ]
    refusal = refused(
        manifest.replace("theirs", "demo")
        .replace("frontend", "backend")
        .replace("  ssh_keys: [laptop]\n", "")
    )
    assert refusal.problems == [
        "instance.yaml:9 (instance web-1): disks-0-image: Choose an image of this project or a shared one."
    ]
    assert not Instance.objects.exists()


def test_a_link_declared_down_is_set_after_creating_a_stopped_instance(apply):
    manifest = MANIFEST.replace(
        "    - {subnet: backend}", "    - {subnet: backend}\n    - {subnet: backend, link: down}"
    )
    assert "    ~ nic eth1: link down" in apply(manifest).splitlines()
    links = Instance.objects.get().nics.values_list("index", "link_desired")
    assert sorted(links) == [(0, "up"), (1, "down")]


def test_a_link_down_on_an_instance_that_starts_at_once_is_refused(refused):
    manifest = MANIFEST.replace("  zone:", "  run_strategy: Always\n  zone:").replace(
        "{subnet: backend}", "{subnet: backend, link: down, confirm_primary: true}"
    )
    refusal = refused(manifest)
    assert refusal.problems == [
        "instance.yaml:12 (instance web-1): nics-0-link: With run strategy Always the instance "
        "starts as it is created, with every link up; create it with the link up and apply "
        "link: down once it runs, or create it with run strategy Manual."
    ]
