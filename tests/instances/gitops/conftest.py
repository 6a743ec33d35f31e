"""A project following a real repository made by the test, served over file://."""

import pytest

from instances.choices import GitAuth, SyncTrigger
from instances.gitops.services import SourceRequest, git_source_save
from instances.gitops.sync import git_source_sync
from instances.models import GitSource, GitSync
from tests.factories import ImageFactory
from tests.git_repos import GitRepo
from tests.instances.manifests.conftest import MANIFEST

WEB_1 = MANIFEST  # the instance the manifests tests apply, pushed to a repository


@pytest.fixture
def repo(tmp_path):
    return GitRepo(tmp_path / "repo")


@pytest.fixture
def image():
    return ImageFactory(name="demo")


@pytest.fixture
def source(project, owner, subnet, image, repo) -> GitSource:
    """The project follows the repository's main branch, manifests/ folder (its first sync is
    queued on commit, which the test's transaction never reaches)."""
    request = SourceRequest(url=repo.url, branch="main", path="manifests", auth=GitAuth.NONE)
    return git_source_save(project=project, actor=owner, request=request)


@pytest.fixture
def sync(source):
    """sync() → the GitSync row of one sync, run here and now (None if nothing was recorded)."""

    def run(trigger: str = SyncTrigger.MANUAL) -> GitSync | None:
        return git_source_sync(source_id=source.pk, trigger=trigger, requested_by="tests")

    return run
