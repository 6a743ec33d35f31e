"""A cloud account's endpoint is a superuser's setting (or a host the environment allows), and
Test connection tells every failure as a message, never a 500 nor the endpoint's own reply."""

import json

import pytest
from django.contrib.auth import get_user_model

from provisioning.clouds.aws.sdk import forget_clients
from provisioning.models import CloudAccount
from provisioning.services.accounts import account_create
from tests.fakes.gce import service_account_key
from tests.provisioning.decoy import decoy_server

pytestmark = pytest.mark.django_db
ACCOUNTS = "/projects/alpha/provisioning/accounts/"
AWS_FORM = {
    "name": "Prod", "provider": "aws", "default_region": "us-east-1",
    "access_key_id": "AKIAEXAMPLE", "secret_access_key": "s3cr3t-value",
}  # fmt: skip


@pytest.fixture
def decoy():
    with decoy_server() as server:
        yield server


@pytest.fixture
def superuser_client(client, project):
    client.force_login(get_user_model().objects.create_superuser("root", password="x"))
    return client


def test_a_project_admin_is_not_offered_the_endpoint_url(client_for, project):
    page = client_for("owner").get(ACCOUNTS).text
    assert 'name="access_key_id"' in page and 'name="endpoint_url"' not in page


def test_a_project_admin_who_posts_an_endpoint_is_refused_at_the_field_and_nothing_is_sent(
    client_for, project, decoy
):
    client = client_for("owner")
    response = client.post(ACCOUNTS, {**AWS_FORM, "endpoint_url": decoy.url})
    assert response.status_code == 200
    assert 'id="endpoint_url-error">Only a superuser sets an endpoint URL' in response.text
    assert not CloudAccount.objects.exists()
    assert decoy.requests == []


def test_the_service_refuses_a_project_admins_endpoint_too(owner, project, decoy):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as refused:
        account_create(project=project, actor=owner, name="Prod", access_key_id="A",
                       secret_access_key="S", endpoint_url=decoy.url)  # fmt: skip
    assert "endpoint_url" in refused.value.message_dict
    assert decoy.requests == []


def test_a_gcp_key_whose_token_uri_is_another_host_is_refused_for_a_project_admin(
    client_for, project, gce, decoy
):
    key = {**service_account_key(gce), "token_uri": f"{decoy.url}/token"}
    data = {"name": "Gcp", "provider": "gcp", "default_region": "us-central1",
            "service_account_key": json.dumps(key)}  # fmt: skip
    response = client_for("owner").post(ACCOUNTS, data)
    assert response.status_code == 200
    assert "The key&#x27;s token_uri must be Google&#x27;s" in response.text
    assert not CloudAccount.objects.exists()
    assert decoy.requests == []


def test_a_project_admin_may_use_a_host_the_environment_allows(
    client_for, project, decoy, settings
):
    settings.ZOPDAY_CLOUD_ENDPOINT_ALLOWLIST = [decoy.url.removeprefix("http://")]
    client = client_for("owner")
    assert "Allowed hosts: 127.0.0.1:" in client.get(ACCOUNTS).text
    assert client.post(ACCOUNTS, {**AWS_FORM, "endpoint_url": decoy.url}).status_code == 302
    assert CloudAccount.objects.get().endpoint_url == decoy.url
    elsewhere = {**AWS_FORM, "name": "Other", "endpoint_url": "http://127.0.0.2:8080"}
    response = client.post(ACCOUNTS, elsewhere)
    assert 'id="endpoint_url-error">Only a superuser sets this endpoint' in response.text


def test_a_superuser_sets_an_endpoint(superuser_client, decoy):
    response = superuser_client.post(ACCOUNTS, {**AWS_FORM, "endpoint_url": decoy.url})
    assert response.status_code == 302
    assert CloudAccount.objects.get().endpoint_url == decoy.url


@pytest.mark.parametrize(
    ("status", "content_type", "body", "delay", "told"),
    [
        (200, "text/html", None, 0, "did not answer as AWS does"),
        (500, "text/html", None, 0, "GetCallerIdentity: 500: Internal Server Error"),
        (403, "text/html", None, 0, "GetCallerIdentity"),
        (200, "application/json", b'{"DECOY-INTERNAL-SECRET": 1}', 0, "did not answer as AWS"),
        (200, "text/xml", b"<DECOY-INTERNAL-SECRET/>", 0, "did not answer as AWS does"),
        (200, "text/html", None, 3, "Read timeout"),
    ],
    ids=["html", "html-500", "html-403", "json", "other-xml", "timeout"],
)
def test_test_connection_to_a_failing_endpoint_is_a_message_without_its_reply(
    superuser_client, project, operator, client_for, decoy, settings,
    status, content_type, body, delay, told,
):  # fmt: skip
    settings.ZOPDAY_CLOUD_CHECK_TIMEOUT = 1
    forget_clients()
    superuser_client.post(ACCOUNTS, {**AWS_FORM, "endpoint_url": decoy.url})
    account = CloudAccount.objects.get()
    decoy.status, decoy.content_type, decoy.delay = status, content_type, delay
    decoy.body = body or decoy.body
    client = client_for("operator")
    path = f"{ACCOUNTS}{account.pk}/test/"
    row = client.post(path, headers={"HX-Request": "true"})
    assert row.status_code == 200
    assert "Failed" in row.text and told in row.text
    assert "DECOY-INTERNAL-SECRET" not in row.text
    page = client.post(path, follow=True)
    assert page.status_code == 200 and "DECOY-INTERNAL-SECRET" not in page.text
    account.refresh_from_db()
    assert account.last_check_ok is False and "DECOY" not in account.last_check_message
    assert decoy.requests  # it was asked: the superuser chose that endpoint
    forget_clients()


def test_the_sandbox_account_tests_ok_for_its_project_admin(client_for, account):
    response = client_for("owner").post(f"{ACCOUNTS}{account.pk}/test/", follow=True)
    assert response.status_code == 200 and "Connected as" in response.text
