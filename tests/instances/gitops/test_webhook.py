"""The webhook: a POST signed with the source's secret queues a sync, once per delivery; anything
else changes nothing."""

import hashlib
import hmac
import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from instances import tasks
from instances.choices import SyncStatus
from instances.models import GitSource, GitWebhookDelivery, Instance
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


REPLAY = {
    "detail": "This delivery was received before: a replay is refused and nothing is synced. To "
    "sync again, push a commit or press Sync now."
}


def test_a_replayed_delivery_is_refused_and_syncs_nothing(
    source, sent, django_capture_on_commit_callbacks
):
    signature = {"X-Hub-Signature-256": signed(source.webhook_secret, PUSH)}
    with django_capture_on_commit_callbacks(execute=True):
        first = post(source, **signature, **{"X-GitHub-Delivery": "d-1"})
        replay = post(source, **signature, **{"X-GitHub-Delivery": "d-1"})
        new_id = post(source, **signature, **{"X-GitHub-Delivery": "d-2"})  # the id is unsigned
    assert [first.status_code, replay.status_code, new_id.status_code] == [202, 409, 409]
    assert replay.json() == REPLAY
    assert len(sent) == 1
    pushed = json.dumps({"ref": "refs/heads/main", "after": "1" * 40}).encode()
    with django_capture_on_commit_callbacks(execute=True):
        answer = post(
            source, pushed, **{"X-Hub-Signature-256": signed(source.webhook_secret, pushed)},
            **{"X-GitHub-Delivery": "d-3"},
        )  # fmt: skip
    assert answer.status_code == 202 and len(sent) == 2


def test_a_gitlab_delivery_is_known_by_its_idempotency_key_or_event_uuid(
    source, sent, django_capture_on_commit_callbacks
):
    token = {"X-Gitlab-Token": source.webhook_secret}
    other = json.dumps({"ref": "refs/heads/main", "after": "2" * 40}).encode()
    with django_capture_on_commit_callbacks(execute=True):
        first = post(source, **token, **{"Idempotency-Key": "k-1"})
        retried = post(source, other, **token, **{"Idempotency-Key": "k-1"})
        by_uuid = post(source, other, **token, **{"X-Gitlab-Event-UUID": "u-1"})
        again = post(source, PUSH.replace(b"0", b"3"), **token, **{"X-Gitlab-Event-UUID": "u-1"})
    codes = [answer.status_code for answer in (first, retried, by_uuid, again)]
    assert codes == [202, 409, 202, 409]
    assert len(sent) == 2


def test_deliveries_are_kept_for_the_retention_only(
    source, sent, django_capture_on_commit_callbacks, settings
):
    signature = {"X-Hub-Signature-256": signed(source.webhook_secret, PUSH)}
    with django_capture_on_commit_callbacks(execute=True):
        assert post(source, **signature, **{"X-GitHub-Delivery": "d-1"}).status_code == 202
    days = settings.ZOPDAY_GITOPS_DELIVERY_DAYS
    GitWebhookDelivery.objects.update(received_at=timezone.now() - timedelta(days=days, hours=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert post(source, **signature, **{"X-GitHub-Delivery": "d-1"}).status_code == 202
    assert len(sent) == 2
    # the old pair is pruned: the two rows are this delivery's id and body
    assert GitWebhookDelivery.objects.count() == 2
