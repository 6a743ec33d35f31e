"""Logins and API tokens are throttled: a guesser is locked out and told when to retry."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from instances.services.tokens import api_token_create
from tests.factories import PASSWORD
from tests.instances.api.helpers import Api

pytestmark = pytest.mark.django_db
GUESSES = 30


def log_in(client, password, username="viewer"):
    return client.post(reverse("login"), {"username": username, "password": password})


def test_thirty_wrong_passwords_lock_the_user_out_of_that_address_with_the_time_to_retry(
    settings, viewer
):
    client = Client()
    answers = [log_in(client, f"guess-{n}").status_code for n in range(GUESSES)]
    limit = settings.AXES_FAILURE_LIMIT
    assert answers[: limit - 1] == [200] * (limit - 1)  # the form's own message
    assert set(answers[limit - 1 :]) == {429}
    refused = log_in(client, PASSWORD)
    assert refused.status_code == 429
    assert "_auth_user_id" not in client.session
    assert "Too many failed logins for this user from your address: try again after" in (
        refused.text
    )
    assert "(in 15 minutes)" in refused.text
    assert int(refused["Retry-After"]) == 15 * 60


def test_another_user_and_another_address_are_not_locked_out_by_the_guesser(
    settings, viewer, operator
):
    for n in range(settings.AXES_FAILURE_LIMIT):
        log_in(Client(), f"guess-{n}")
    assert log_in(Client(), PASSWORD, username="operator").status_code == 302
    elsewhere = Client(REMOTE_ADDR="192.0.2.7")
    assert log_in(elsewhere, PASSWORD).status_code == 302


def test_the_right_password_works_again_after_the_cool_off(settings, viewer):
    from axes.models import AccessAttempt

    client = Client()
    for n in range(settings.AXES_FAILURE_LIMIT):
        log_in(client, f"guess-{n}")
    assert log_in(client, PASSWORD).status_code == 429
    past = AccessAttempt.objects.get().attempt_time - settings.AXES_COOLOFF_TIME
    AccessAttempt.objects.update(attempt_time=past - timedelta(seconds=1))
    assert log_in(client, PASSWORD).status_code == 302


def test_an_admin_lifts_a_lockout_with_axes_reset(settings, viewer):
    client = Client()
    for n in range(settings.AXES_FAILURE_LIMIT):
        log_in(client, f"guess-{n}")
    call_command("axes_reset_username", "viewer")
    assert log_in(client, PASSWORD).status_code == 302


def test_a_login_resets_the_count_of_failures(settings, viewer):
    client = Client()
    for _ in range(2):
        for n in range(settings.AXES_FAILURE_LIMIT - 1):
            log_in(client, f"guess-{n}")
        assert log_in(client, PASSWORD).status_code == 302
        client.post(reverse("logout"))


def test_thirty_bad_api_tokens_are_answered_429_with_retry_after(settings, operator):
    guesser = Api(Client(), {"Authorization": "Bearer zop_guess"})
    answers = [guesser.get("/projects") for _ in range(GUESSES)]
    limit = settings.AXES_FAILURE_LIMIT
    assert [a.status_code for a in answers[: limit - 1]] == [401] * (limit - 1)
    assert {a.status_code for a in answers[limit - 1 :]} == {429}
    last = answers[-1]
    assert int(last["Retry-After"]) == 15 * 60
    assert last.json()["detail"].startswith(
        "Too many bad API tokens from your address: try again after"
    )
    # the user's own login is not locked by what the address's tokens did
    assert log_in(Client(), PASSWORD, username="operator").status_code == 302


def test_a_good_token_from_another_address_still_works_while_one_is_throttled(settings, operator):
    _, plaintext = api_token_create(user=operator, name="laptop")
    guesser = Api(Client(), {"Authorization": "Bearer zop_guess"})
    for _ in range(settings.AXES_FAILURE_LIMIT):
        guesser.get("/projects")
    script = Api(Client(REMOTE_ADDR="192.0.2.8"), {"Authorization": f"Bearer {plaintext}"})
    assert script.get("/projects").status_code == 200


def test_bad_unknown_tokens_from_an_address_do_not_block_a_good_token_from_it(settings, operator):
    _, plaintext = api_token_create(user=operator, name="ci")
    guesser = Api(Client(), {"Authorization": "Bearer zop_guess"})
    answers = [guesser.get("/projects").status_code for _ in range(settings.AXES_FAILURE_LIMIT)]
    assert answers[-1] == 429
    script = Api(Client(), {"Authorization": f"Bearer {plaintext}"})
    assert script.get("/projects").status_code == 200
    # the address stays throttled for unknown tokens
    assert guesser.get("/projects").status_code == 429


def test_wrong_secrets_for_a_token_throttle_that_token_from_the_guessers_address_only(
    settings, operator
):
    _, plaintext = api_token_create(user=operator, name="ci")
    _, other = api_token_create(user=operator, name="laptop")
    forged = plaintext[:12] + "x" * (len(plaintext) - 12)
    guesser = Api(Client(), {"Authorization": f"Bearer {forged}"})
    answers = [guesser.get("/projects").status_code for _ in range(GUESSES)]
    assert set(answers[settings.AXES_FAILURE_LIMIT - 1 :]) == {429}
    # the token is refused from the guesser's address, told why
    mine = Api(Client(), {"Authorization": f"Bearer {plaintext}"})
    refused = mine.get("/projects")
    assert refused.status_code == 429
    assert refused.json()["detail"].startswith(
        "Too many bad secrets for this API token from your address: try again after"
    )
    assert int(refused["Retry-After"]) == 15 * 60
    # its owner elsewhere, and the address's other tokens, keep working; unknown tokens are
    # not counted
    owner = Api(Client(REMOTE_ADDR="192.0.2.9"), {"Authorization": f"Bearer {plaintext}"})
    assert owner.get("/projects").status_code == 200
    assert Api(Client(), {"Authorization": f"Bearer {other}"}).get("/projects").status_code == 200
    unknown = Api(Client(), {"Authorization": "Bearer zop_guess"})
    assert unknown.get("/projects").status_code == 401
