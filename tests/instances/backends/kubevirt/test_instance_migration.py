"""Migrate on instances: a running KubeVirt instance moves to another node of its zone through
the API and a real Celery worker, its page showing the migration as it goes; a failed one
leaves it running where it was; a stopped or QEMU instance is refused."""

import time

import pytest
from django.urls import reverse

from instances.choices import PowerState
from instances.models import Instance
from tests import factories
from tests.factories import SubnetFactory
from tests.fakes.kubevirt.fixtures import BOOT_TIMEOUT, create, wait_for_prompt, wait_for_state

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def wait_for_phase(instance: Instance, phase: str, timeout: float = BOOT_TIMEOUT) -> Instance:
    deadline = time.monotonic() + timeout
    while True:
        instance.refresh_from_db()
        if instance.migration.get("phase") == phase:
            return instance
        assert time.monotonic() < deadline, f"never {phase} (it is {instance.migration})"
        time.sleep(0.2)


def wait_until(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.1)


def panel(client, instance: Instance) -> str:
    url = reverse("instance-power-panel", args=[instance.project.slug, instance.pk])
    return client.get(url).text


def test_a_running_instance_migrates_to_the_other_node_of_its_zone_as_its_page_shows(
    celery_worker_process, kube_api, kubevirt, cluster, watching, cluster_lan, operator,
    api_for, client_for,
):  # fmt: skip
    instance = create(operator, cluster_lan)
    api, page = api_for("operator"), client_for("viewer")
    base = f"/projects/{instance.project.slug}/instances/{instance.pk}"
    assert api.post(f"{base}/start").status_code == 202
    wait_for_state(instance, PowerState.RUNNING)
    wait_for_prompt(kubevirt, instance)
    node_1 = 'data-fact="node">Node: <span class="mono">node-1<'
    wait_until(lambda: node_1 in panel(page, instance), "the watch saw its VMI on node-1")
    asked = kube_api.requests["GET virtualmachineinstances"]
    panel(page, instance)  # the panel polls every few seconds: the node is the watch's
    assert kube_api.requests["GET virtualmachineinstances"] == asked
    kubevirt.migrations.held = True  # it runs until the test has looked at it

    answer = api.post(f"{base}/migrate")

    assert (answer.status_code, answer.json()["power_state"]) == (202, "migrating")
    wait_for_phase(instance, "Running")
    shown = api.get(base).json()
    assert shown["power_state"] == "migrating"
    assert shown["migration"] == {
        "phase": "Running", "source": "node-1", "target": "node-3", "message": "",
    }  # fmt: skip
    during = panel(page, instance)
    assert "Migration Running: node-1 → node-3" in during and 'hx-trigger="every 1s"' in during
    kubevirt.migrations.held = False
    instance = wait_for_state(instance, PowerState.RUNNING)
    assert instance.migration["phase"] == "Succeeded" and instance.power_message == ""
    after = panel(page, instance)
    assert "Migration Succeeded: node-1 → node-3" in after
    assert 'data-fact="node">Node: <span class="mono">node-3<' in after
    assert api.get(base).json()["migration"]["target"] == "node-3"


def test_a_migration_with_no_target_leaves_the_instance_running_on_its_node(
    celery_worker_process, kube_api, kubevirt, cluster, watching, project, operator, api_for
):
    kubevirt.migrations.unschedulable_timeout = 1.0
    lan_b = SubnetFactory(project=project, name="lan-b", zone="zone-b", cidr_v4="10.92.0.0/24",
                          gateway="10.92.0.1", dns_resolvers="")  # fmt: skip
    instance = factories.demo_instance(
        actor=operator, image=factories.demo_image(), subnet=lan_b, name="far", ip="10.92.0.10",
        cluster="lab", zone="zone-b",
    )  # fmt: skip
    api = api_for("operator")
    base = f"/projects/{instance.project.slug}/instances/{instance.pk}"
    api.post(f"{base}/start")
    wait_for_state(instance, PowerState.RUNNING)

    assert api.post(f"{base}/migrate").status_code == 202
    instance = wait_for_phase(instance, "Failed")

    instance = wait_for_state(instance, PowerState.RUNNING)
    assert instance.power_message.startswith(
        "The migration failed: the target pod could not be scheduled"
    )
    assert instance.power_message.endswith("It runs on node-2.")
    assert instance.migration["source"] == "node-2"


def test_a_stopped_instance_on_a_cluster_is_refused_with_the_reason(
    kube_api, kubevirt, cluster, cluster_lan, operator, api_for
):
    instance = create(operator, cluster_lan)

    answer = api_for("operator").post(
        f"/projects/{instance.project.slug}/instances/{instance.pk}/migrate"
    )

    assert answer.status_code == 409
    assert answer.json()["detail"] == "Only a running instance migrates; this one is stopped."
    instance.refresh_from_db()
    assert (instance.power_state, instance.migration) == (PowerState.STOPPED, {})


def test_a_qemu_instance_has_no_migrate_button_and_the_api_refuses_it(
    project, operator, api_for, client_for
):
    lan = SubnetFactory(project=project, name="lan", cidr_v4="10.93.0.0/24",
                        gateway="10.93.0.1", dns_resolvers="")  # fmt: skip
    instance = factories.demo_instance(actor=operator, image=factories.demo_image(), subnet=lan,
                                       name="local", ip="10.93.0.10")  # fmt: skip
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.RUNNING)

    answer = api_for("operator").post(f"/projects/{project.slug}/instances/{instance.pk}/migrate")

    assert answer.status_code == 409
    assert answer.json()["detail"].startswith("Live migration moves KubeVirt instances")
    page = panel(client_for("operator"), instance)
    assert 'data-action="restart"' in page and 'data-action="migrate"' not in page
