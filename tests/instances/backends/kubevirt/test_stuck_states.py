"""A worker that died during a power operation on a cluster instance leaves it claimed
(Starting, Restarting...) with nobody to settle it, as the cluster's watch moves a claimed
state only where its request leads: the reconcile pass settles it to what the cluster runs."""

from datetime import timedelta

import pytest
from django.utils import timezone

from instances.choices import PowerState
from instances.models import Instance
from instances.services import power
from instances.services.reconciler import STUCK_AFTER_SECONDS
from instances.tasks import reconcile
from tests import factories
from tests.fakes.kubevirt.fixtures import create, wait_for_state

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def left_in(instance: Instance, state: str, seconds_ago: float) -> None:
    """The row as a worker killed during the operation leaves it."""
    at = timezone.now() - timedelta(seconds=seconds_ago)
    Instance.objects.filter(pk=instance.pk).update(power_state=state, state_changed_at=at)


def test_states_a_dead_worker_left_on_cluster_instances_settle_to_what_runs(
    celery_worker_process, kubevirt, cluster, watching, cluster_lan, operator
):
    running = create(operator, cluster_lan)
    power.instance_start(instance=running, actor=operator)
    wait_for_state(running, PowerState.RUNNING)
    stopped = factories.demo_instance(
        actor=operator, image=factories.demo_image(), subnet=cluster_lan, name="db",
        ip="10.91.0.11", cluster="lab",
    )  # fmt: skip
    recent = factories.demo_instance(
        actor=operator, image=factories.demo_image(), subnet=cluster_lan, name="cache",
        ip="10.91.0.12", cluster="lab",
    )  # fmt: skip
    left_in(running, PowerState.RESTARTING, STUCK_AFTER_SECONDS + 60)
    left_in(stopped, PowerState.STARTING, STUCK_AFTER_SECONDS + 60)
    left_in(recent, PowerState.STARTING, 10)  # its work may still be going on

    reconcile()  # the beat's pass: the stuck ones go to a worker that can reach the cluster

    running = wait_for_state(running, PowerState.RUNNING, timeout=30)
    assert running.power_message == (
        f"Restarting did not finish within {STUCK_AFTER_SECONDS // 60} minutes (its worker may "
        "have stopped); the instance is running on lab."
    )
    stopped = wait_for_state(stopped, PowerState.STOPPED, timeout=30)
    assert "the instance is stopped on lab" in stopped.power_message
    recent.refresh_from_db()
    assert recent.power_state == PowerState.STARTING
    power.instance_start(instance=stopped, actor=operator)  # and each can be used again
    wait_for_state(stopped, PowerState.RUNNING)
