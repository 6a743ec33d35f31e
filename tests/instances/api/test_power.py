"""Power actions and the run strategy: the API only claims the transition; the task is queued on
commit (read back here from the instance's host queue, never run)."""

import pytest

from instances.choices import PowerState, RunStrategy
from instances.models import Instance

pytestmark = pytest.mark.django_db


def set_state(instance, state):
    Instance.objects.filter(pk=instance.pk).update(power_state=state)


def test_an_operator_can_power_on(
    api_for, operator, instance, host_queue_of, django_capture_on_commit_callbacks
):
    queue = host_queue_of(instance)
    with django_capture_on_commit_callbacks(execute=True):
        response = api_for("operator").post(f"/projects/alpha/instances/{instance.pk}/start")
    assert response.status_code == 202
    assert response.json()["power_state"] == "starting"
    assert [sent.task for sent in queue.sent()] == ["instances.machine_start"]
    instance.refresh_from_db()
    assert instance.power_state == PowerState.STARTING


def test_a_viewer_cannot_power_on(api_for, viewer, instance, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        response = api_for("viewer").post(f"/projects/alpha/instances/{instance.pk}/start")
    assert response.status_code == 403
    assert response.json()["detail"] == "This needs the operator role in Alpha."
    assert callbacks == []
    instance.refresh_from_db()
    assert instance.power_state == PowerState.STOPPED


def test_an_outsider_gets_404_for_power_actions(api_for, outsider, instance):
    assert (
        api_for("outsider").post(f"/projects/alpha/instances/{instance.pk}/start").status_code
        == 404
    )


def test_an_anonymous_caller_gets_401_for_power_actions(anonymous, instance):
    assert anonymous.post(f"/projects/alpha/instances/{instance.pk}/start").status_code == 401


def test_starting_twice_is_a_conflict_that_says_why(api_for, operator, instance):
    api = api_for("operator")
    api.post(f"/projects/alpha/instances/{instance.pk}/start")
    response = api.post(f"/projects/alpha/instances/{instance.pk}/start")
    assert response.status_code == 409
    assert response.json() == {"detail": "The instance is starting.", "errors": {}}


@pytest.mark.parametrize(
    ("action", "claimed", "task"),
    [
        ("shutdown", "stopping", "instances.machine_shutdown"),
        ("force-stop", "stopping", "instances.machine_force_stop"),
        ("restart", "restarting", "instances.machine_restart"),
    ],
)
def test_a_running_instance_can_be_stopped_and_restarted(
    api_for, operator, instance, action, claimed, task, host_queue_of,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    set_state(instance, PowerState.RUNNING)
    queue = host_queue_of(instance)
    with django_capture_on_commit_callbacks(execute=True):
        response = api_for("operator").post(f"/projects/alpha/instances/{instance.pk}/{action}")
    assert (response.status_code, response.json()["power_state"]) == (202, claimed)
    assert [sent.task for sent in queue.sent()] == [task]


def test_a_stopped_instance_cannot_be_shut_down(api_for, operator, instance):
    response = api_for("operator").post(f"/projects/alpha/instances/{instance.pk}/shutdown")
    assert response.status_code == 409
    assert response.json()["detail"] == "The instance is stopped."


def test_patch_sets_the_run_strategy_and_applies_it(
    api_for, operator, instance, host_queue_of, django_capture_on_commit_callbacks
):
    queue = host_queue_of(instance)
    with django_capture_on_commit_callbacks(execute=True):
        response = api_for("operator").patch(
            f"/projects/alpha/instances/{instance.pk}", {"run_strategy": "Always"}
        )
    assert response.status_code == 200
    assert (response.json()["run_strategy"], response.json()["power_state"]) == (
        "Always",
        "starting",
    )
    assert [sent.task for sent in queue.sent()] == ["instances.machine_start"]


def test_post_sets_the_run_strategy_too(api_for, operator, instance):
    response = api_for("operator").post(
        f"/projects/alpha/instances/{instance.pk}/run-strategy", {"run_strategy": "Halted"}
    )
    assert response.json()["run_strategy"] == RunStrategy.HALTED
    start = api_for("operator").post(f"/projects/alpha/instances/{instance.pk}/start")
    assert start.status_code == 409
    assert start.json()["detail"] == "The run strategy is Halted: change it before starting."


def test_an_unknown_run_strategy_is_a_field_error(api_for, operator, instance):
    response = api_for("operator").patch(
        f"/projects/alpha/instances/{instance.pk}", {"run_strategy": "Sometimes"}
    )
    assert response.status_code == 422
    assert response.json()["errors"] == {
        "run_strategy": ["Input should be 'Always', 'Manual', 'RerunOnFailure', 'Once' or 'Halted'"]
    }


def test_a_viewer_cannot_change_the_run_strategy(api_for, viewer, instance):
    response = api_for("viewer").patch(
        f"/projects/alpha/instances/{instance.pk}", {"run_strategy": "Always"}
    )
    assert (response.status_code, response.json()["detail"]) == (
        403,
        "This needs the operator role in Alpha.",
    )


def test_the_run_strategy_waits_for_a_transition_to_end(api_for, operator, instance):
    set_state(instance, PowerState.STARTING)
    response = api_for("operator").patch(
        f"/projects/alpha/instances/{instance.pk}", {"run_strategy": "Halted"}
    )
    assert response.status_code == 409
    assert response.json()["detail"] == "Wait until the instance is no longer starting."
