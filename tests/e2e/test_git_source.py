"""GitOps end to end: an owner connects the project to a repository served by `git daemon` on
loopback, pushes a commit that adds an instance, presses Sync now, and sees the instance appear
with the commit shown; a real Celery worker runs the syncs."""

import pytest
from playwright.sync_api import expect

from instances.models import Instance
from tests.factories import ImageFactory
from tests.git_repos import GitDaemon, GitRepo
from tests.instances.gitops.conftest import WEB_1

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.integration]

SYNC_TIMEOUT = 60_000  # ms


@pytest.fixture
def served_repo(tmp_path):
    repo = GitRepo(tmp_path / "served" / "team")
    daemon = GitDaemon(tmp_path / "served")
    yield repo, daemon.url(repo)
    daemon.stop()


def test_connect_push_sync_and_see_the_instance_with_its_commit(
    page, login, project, owner, subnet, served_repo, celery_worker_process
):
    ImageFactory(name="demo")
    repo, url = served_repo
    repo.commit({"manifests/web-1.yaml": WEB_1}, "Add web-1")

    login("owner")
    page.goto(f"/projects/{project.slug}/git/")
    page.fill("#id_url", url)
    page.fill("#id_branch", "main")
    page.fill("#id_path", "manifests")
    page.get_by_role("button", name="Connect").click()
    expect(page.get_by_test_id("git-url")).to_have_text(url)
    first = page.get_by_test_id("sync").first
    expect(first).to_have_attribute("data-status", "applied", timeout=SYNC_TIMEOUT)  # polled
    expect(first.get_by_test_id("sync-subject")).to_have_text("Add web-1")

    sha = repo.commit({"manifests/web-2.yaml": WEB_1.replace("web-1", "web-2")}, "Add web-2")
    page.get_by_role("button", name="Sync now").click()
    latest = page.get_by_test_id("sync").first
    expect(latest.get_by_test_id("sync-sha")).to_have_text(sha[:10], timeout=SYNC_TIMEOUT)
    expect(latest).to_have_attribute("data-status", "applied", timeout=SYNC_TIMEOUT)
    expect(latest.get_by_test_id("sync-subject")).to_have_text("Add web-2")
    expect(latest.get_by_test_id("sync-changes")).to_contain_text("+ instance alpha/web-2 (create)")
    expect(latest).to_contain_text("A\tmanifests/web-2.yaml")

    page.get_by_role("link", name="Instances").click()
    expect(page.get_by_role("link", name="web-2")).to_be_visible()
    assert Instance.objects.filter(project=project, name="web-2").exists()
