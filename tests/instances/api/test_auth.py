"""Who may call the API: tokens (stored hashed), sessions with CSRF, and nobody else."""

import hashlib
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from instances.models import ApiToken, AuditEvent
from instances.services.tokens import api_token_authenticate, api_token_create
from tests.instances.api.helpers import Api

pytestmark = pytest.mark.django_db


def bearer(plaintext):
    return Api(Client(), {"Authorization": f"Bearer {plaintext}"})


def test_a_token_authenticates_its_user(operator, project):
    _, plaintext = api_token_create(user=operator, name="laptop")
    response = bearer(plaintext).get("/projects")
    assert response.status_code == 200
    assert response.json() == [
        {"slug": "alpha", "name": "Alpha", "description": "", "role": "operator"}
    ]


def test_tokens_are_stored_hashed_and_shown_once(operator):
    token, plaintext = api_token_create(user=operator, name="laptop")
    assert plaintext.startswith("zop_") and len(plaintext) > 40
    assert token.token_hash == hashlib.sha256(plaintext.encode()).hexdigest()
    assert token.prefix == plaintext[:12]
    stored = ApiToken.objects.filter(pk=token.pk).values().get()
    assert plaintext not in [str(value) for value in stored.values()]
    assert AuditEvent.objects.filter(action="api_token.create", actor=operator).exists()


def test_a_wrong_token_is_refused_with_401(operator, project):
    _, plaintext = api_token_create(user=operator, name="laptop")
    response = bearer(plaintext[:-1] + "x").get("/projects")
    assert response.status_code == 401
    assert response.json()["detail"] == "The API token is invalid or has expired."
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_an_expired_token_is_refused(operator):
    token, plaintext = api_token_create(
        user=operator, name="ci", expires_at=timezone.now() + timedelta(hours=1)
    )
    assert bearer(plaintext).get("/projects").status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert bearer(plaintext).get("/projects").status_code == 401


def test_a_token_expiring_in_the_past_is_not_created(operator):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError, match="The expiry must be in the future."):
        api_token_create(user=operator, name="ci", expires_at=timezone.now())


def test_the_token_of_a_deactivated_user_is_refused(operator):
    _, plaintext = api_token_create(user=operator, name="laptop")
    operator.is_active = False
    operator.save()
    assert bearer(plaintext).get("/projects").status_code == 401


def test_a_bad_token_is_refused_even_with_a_session(operator, project):
    client = Client()
    client.force_login(operator)
    response = Api(client, {"Authorization": "Bearer zop_nope"}).get("/projects")
    assert response.status_code == 401


def test_using_a_token_records_when_it_was_last_used(operator):
    token, plaintext = api_token_create(user=operator, name="laptop")
    assert token.last_used_at is None
    before = timezone.now()
    assert api_token_authenticate(plaintext=plaintext) == operator
    token.refresh_from_db()
    first_use = token.last_used_at
    assert first_use is not None and before <= first_use <= timezone.now()
    api_token_authenticate(plaintext=plaintext)  # again within the minute: no new write
    token.refresh_from_db()
    assert token.last_used_at == first_use


def test_an_anonymous_caller_gets_401_for_reads_and_writes(anonymous, project):
    assert anonymous.get("/projects").status_code == 401
    response = anonymous.post("/projects/alpha/subnets", {"name": "x", "zone": "local-1a"})
    assert response.status_code == 401
    assert response.json()["detail"].startswith("Log in, or send an API token")


def test_a_session_reads_without_a_csrf_token(operator, project):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert Api(client).get("/projects/alpha").json()["role"] == "operator"


def test_a_session_write_needs_the_csrf_token(operator, project):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    body = {"name": "web", "zone": "local-1a", "cidr_v4": "10.9.0.0/24"}
    refused = Api(client).post("/projects/alpha/subnets", body)
    assert refused.status_code == 403
    assert refused.json()["detail"] == "CSRF check Failed"

    client.get("/login/")  # sets the csrftoken cookie, as any page does
    csrf = {"X-CSRFToken": client.cookies["csrftoken"].value}
    assert Api(client, csrf).post("/projects/alpha/subnets", body).status_code == 201


def test_the_management_command_prints_a_new_token_once(operator):
    out, err = StringIO(), StringIO()
    call_command("api_token", "create", "operator", "deploys", stdout=out, stderr=err)
    plaintext = out.getvalue().strip()
    token = ApiToken.objects.get(name="deploys")
    assert token.user == operator and plaintext.startswith(token.prefix)
    assert "not shown again" in err.getvalue()
    assert api_token_authenticate(plaintext=plaintext) == operator


def test_the_management_command_names_an_unknown_user(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="No user named ghost."):
        call_command("api_token", "create", "ghost", "deploys")


def test_the_openapi_document_and_the_docs_page_are_served(client):
    schema = client.get("/api/v1/openapi.json").json()
    assert schema["info"]["title"] == "ZopDay console API"
    assert "/api/v1/projects/{slug}/instances/{instance_id}/start" in schema["paths"]
    assert client.get("/api/v1/docs").status_code == 200
