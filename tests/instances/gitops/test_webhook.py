"""The webhook: a POST signed with the source's secret queues a sync; anything else changes
nothing."""

import hashlib
import hmac
import json

import pytest
from django.test import Client

from instances import tasks
from instances.choices import SyncStatus
from instances.models import GitSource, Instance
from instances.services import outbox
from tests.instances.gitops.conftest import WEB_1

pytestmark = pytest.mark.django_db

PUSH = json.dumps({"ref": "refs/heads/main", "after": "0" * 40}).encode()


def signed(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@pytest.fixture
def sent(monkeypatch):
    """The tasks sent once the request's transaction commits, as (name, args)."""
    found: list[tuple[str, list]] = []
    monkeypatch.setattr(
        outbox.current_app, "send_task", lambda name, args, **_: found.append((name, list(args)))
    )
    return found


def post(source, body=PUSH, **headers):
    return Client().post(
        f"/gitops/{source.webhook_id}/webhook/",
        body,
        content_type="application/json",
        headers=headers,
    )


def test_a_bad_signature_is_refused_and_changes_nothing(
    source, sent, django_capture_on_commit_callbacks
):
    GitSource.objects.filter(pk=source.pk).update(sync_requested_at=None)
    with django_capture_on_commit_callbacks(execute=True):
        wrong = post(source, **{"X-Hub-Signature-256": signed("not the secret", PUSH)})
        unsigned = post(source)
        gitlab = post(source, **{"X-Gitlab-Token": "not the secret"})
    assert [wrong.status_code, unsigned.status_code, gitlab.status_code] == [403, 403, 403]
    assert wrong.json() == {"detail": "The signature does not match."}
    assert sent == []
    assert GitSource.objects.get().sync_requested_at is None


def test_a_good_signature_triggers_a_sync(repo, source, sent, django_capture_on_commit_callbacks):
    sha = repo.commit({"manifests/web-1.yaml": WEB_1}, "Add web-1")
    with django_capture_on_commit_callbacks(execute=True):
        answer = post(source, **{"X-Hub-Signature-256": signed(source.webhook_secret, PUSH)})
    assert answer.status_code == 202
    assert sent == [("instances.gitops_sync", [source.pk, "webhook", "webhook"])]
    tasks.gitops_sync(*sent[0][1])  # what the worker runs
    done = source.syncs.get()
    assert (done.status, done.sha, done.trigger) == (SyncStatus.APPLIED, sha, "webhook")
    assert Instance.objects.filter(name="web-1").exists()


def test_gitlabs_token_header_is_accepted(source, sent, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        answer = post(source, **{"X-Gitlab-Token": source.webhook_secret})
    assert answer.status_code == 202 and len(sent) == 1


def test_a_push_to_another_branch_is_ignored(source, sent, django_capture_on_commit_callbacks):
    body = json.dumps({"ref": "refs/heads/feature"}).encode()
    with django_capture_on_commit_callbacks(execute=True):
        answer = post(source, body, **{"X-Hub-Signature-256": signed(source.webhook_secret, body)})
    assert answer.status_code == 200
    assert answer.json() == {"detail": "A push to feature, not main: ignored."}
    assert sent == []


def test_get_changes_nothing_and_an_unknown_source_is_not_found(source, sent):
    assert Client().get(f"/gitops/{source.webhook_id}/webhook/").status_code == 405
    unknown = "00000000-0000-4000-8000-000000000000"
    assert (
        Client()
        .post(f"/gitops/{unknown}/webhook/", PUSH, content_type="application/json")
        .status_code
        == 404
    )
    assert sent == []


def test_only_the_webhook_goes_without_a_csrf_token(source, client_for):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(source.actor)
    assert strict.post("/projects/alpha/git/sync/").status_code == 403
    hook = Client(enforce_csrf_checks=True).post(
        f"/gitops/{source.webhook_id}/webhook/", PUSH, content_type="application/json",
        headers={"X-Hub-Signature-256": signed(source.webhook_secret, PUSH)},
    )  # fmt: skip
    assert hook.status_code == 202
