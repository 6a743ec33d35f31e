"""The project's Git page: owners connect and change the source, operators may ask for a sync,
viewers see the source and its syncs and change nothing."""

import pytest

from instances.choices import GitAuth
from instances.models import GitSource
from tests.instances.gitops.conftest import WEB_1

pytestmark = pytest.mark.django_db

PAGE = "/projects/alpha/git/"


def form(url: str, **fields: str) -> dict[str, str]:
    return {
        "url": url,
        "branch": "main",
        "path": "manifests",
        "auth": GitAuth.NONE,
        "credential": "",
        **fields,
    }


def test_an_owner_connects_the_project_to_a_repository(client_for, repo, project, owner):
    answer = client_for("owner").post(PAGE, form(repo.url))
    assert answer.status_code == 302
    source = GitSource.objects.get()
    assert (source.url, source.branch, source.path, source.actor) == (
        repo.url,
        "main",
        "manifests",
        owner,
    )
    assert source.sync_requested_at is not None  # a first sync is queued
    page = client_for("owner").get(PAGE).content.decode()
    assert repo.url in page and "Sync now" in page and source.webhook_secret in page


def test_the_form_says_what_is_wrong(client_for, project, owner):
    answer = client_for("owner").post(
        PAGE, form("ftp://example.test/repo.git", branch="bad..branch", auth=GitAuth.TOKEN)
    )
    assert answer.status_code == 200
    errors = answer.context["form"].errors
    assert errors["url"] == [
        "Give a repository URL starting with https:// or ssh:// or http:// or git:// or file://."
    ]
    assert errors["branch"] == ["This is not a branch name git accepts."]
    assert errors["credential"] == ["Give the deploy key or the token."]
    assert not GitSource.objects.exists()


def test_a_token_in_the_url_is_refused(client_for, project, owner):
    answer = client_for("owner").post(PAGE, form("https://bot:ghp_abc@example.test/r.git"))
    assert "Leave the token out of the URL" in answer.context["form"].errors["url"][0]


def test_viewers_see_the_source_and_its_syncs(client_for, source, repo, sync, viewer):
    sha = repo.commit({"manifests/web-1.yaml": WEB_1}, "Add web-1")
    sync()
    page = client_for("viewer").get(PAGE).content.decode()
    assert repo.url in page and sha[:10] in page and "Add web-1" in page
    assert "+ instance alpha/web-1 (create)" in page
    assert 'name="url"' not in page  # no form
    assert PAGE + "sync/" not in page and PAGE + "disconnect/" not in page  # no buttons
    assert source.webhook_secret not in page


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_only_owners_change_the_source(client_for, source, role, repo):
    client = client_for(role)
    assert client.post(PAGE, form("file:///elsewhere.git")).status_code == 403
    assert client.post(PAGE + "disconnect/").status_code == 403
    assert client.post(PAGE + "webhook-secret/").status_code == 403
    unchanged = GitSource.objects.get()
    assert (unchanged.url, unchanged.webhook_secret) == (repo.url, source.webhook_secret)


def test_operators_may_sync_now_and_viewers_may_not(client_for, source, viewer, operator):
    GitSource.objects.update(sync_requested_at=None)
    assert client_for("viewer").post(PAGE + "sync/").status_code == 403
    assert GitSource.objects.get().sync_requested_at is None
    assert client_for("operator").post(PAGE + "sync/").status_code == 302
    assert GitSource.objects.get().sync_requested_at is not None


def test_sync_now_is_post_only_and_outsiders_see_no_project(client_for, source, outsider):
    assert client_for("owner").get(PAGE + "sync/").status_code == 405
    assert client_for("outsider").get(PAGE).status_code == 404


def test_the_syncs_poll_stops_when_nothing_runs(client_for, source):
    assert client_for("owner").get(PAGE + "syncs/").status_code == 200  # the first sync asked
    GitSource.objects.update(sync_requested_at=None)
    assert client_for("owner").get(PAGE + "syncs/").status_code == 286


def test_an_owner_disconnects_and_what_it_applied_stays(client_for, source, repo, sync):
    repo.commit({"manifests/web-1.yaml": WEB_1}, "Add web-1")
    sync()
    assert client_for("owner").post(PAGE + "disconnect/").status_code == 302
    assert not GitSource.objects.exists()
    assert source.project.instances.filter(name="web-1").exists()
