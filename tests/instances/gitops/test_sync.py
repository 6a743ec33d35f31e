"""A sync applies the commit's manifests, says what changed and what failed, and applies nothing
from a bad commit; the same commit twice changes nothing."""

import pytest
from django.utils import timezone

from instances.choices import SyncStatus, SyncTrigger
from instances.models import AuditEvent, GitSource, Instance, OutboxMessage
from instances.services.instances import instance_delete, instance_set_run_strategy
from tests.instances.gitops.conftest import WEB_1
from tests.yaml_bombs import billion_laughs, nested

pytestmark = pytest.mark.django_db
LAUGHS = billion_laughs("  ")  # under spec: from line 5, the first alias on line 6


def test_a_sync_applies_the_commit_and_shows_it(repo, sync):
    sha = repo.commit({"manifests/web-1.yaml": WEB_1}, "Add web-1")
    done = sync()
    assert done.status == SyncStatus.APPLIED
    assert (done.sha, done.subject, done.author) == (
        sha,
        "Add web-1",
        "Ada Tester <ada@example.test>",
    )
    assert done.message == f"Applied {sha[:10]}: 1 created, 0 changed, 0 unchanged."
    assert done.changes[0] == "+ instance alpha/web-1 (create)"
    assert done.files == ["(first sync)"] and done.problems == [] and done.drift == []
    instance = Instance.objects.get(name="web-1")
    assert instance.disks.get(name="web-1-data").size_gb == 10
    assert GitSource.objects.get().applied_sha == sha
    event = AuditEvent.objects.filter(action="gitsource.sync").get()
    assert (event.actor_name, event.outcome) == ("owner", "success")


def test_a_second_sync_of_the_same_commit_changes_nothing_and_says_so(repo, sync):
    sha = repo.commit({"manifests/web-1.yaml": WEB_1}, "Add web-1")
    sync()
    instance = Instance.objects.get()
    done = sync()
    assert done.status == SyncStatus.UNCHANGED
    assert done.message == f"No changes: {sha[:10]} is already applied (1 unchanged)."
    assert done.changes == [] and done.files == [] and done.drift == []
    assert list(Instance.objects.values_list("pk", flat=True)) == [instance.pk]


def test_a_new_commit_shows_its_files_and_the_plans_diff(repo, sync):
    repo.commit({"manifests/web-1.yaml": WEB_1, "README.md": "not a manifest"}, "Add web-1")
    sync()
    repo.commit({"manifests/web-1.yaml": WEB_1.replace("size_gb: 10", "size_gb: 20")}, "Grow")
    done = sync()
    assert done.status == SyncStatus.APPLIED
    assert done.files == ["M\tmanifests/web-1.yaml"]
    assert done.changes == [
        "~ instance alpha/web-1 (change)",
        "    ~ disk web-1-data: size 10 GB -> 20 GB",
    ]
    assert Instance.objects.get().disks.get(name="web-1-data").size_gb == 20


def test_a_bad_commit_applies_nothing_and_says_why(repo, sync):
    first = repo.commit({"manifests/web-1.yaml": WEB_1}, "Add web-1")
    sync()
    web_2 = WEB_1.replace("web-1", "web-2")
    web_3 = WEB_1.replace("web-1", "web-3").replace("local-1a", "mars-1a")
    repo.commit({"manifests/web-2.yaml": web_2, "manifests/web-3.yaml": web_3}, "Add two")
    done = sync()
    assert done.status == SyncStatus.FAILED
    assert done.message.startswith("Nothing applied from ") and done.message.endswith(
        ": 1 problem."
    )
    assert len(done.problems) == 1
    # the zone's own line: WEB_1 gives it on line 5
    assert done.problems[0].startswith("manifests/web-3.yaml:5 (instance web-3): zone: ")
    assert done.files == ["A\tmanifests/web-2.yaml", "A\tmanifests/web-3.yaml"]
    assert list(Instance.objects.values_list("name", flat=True)) == ["web-1"]
    assert GitSource.objects.get().applied_sha == first
    assert AuditEvent.objects.filter(action="gitsource.sync").first().outcome == "failure"


def test_invalid_yaml_is_located_at_its_line(repo, sync):
    repo.commit({"manifests/web-1.yaml": WEB_1 + "  bad: [\n"}, "Break it")
    done = sync()
    assert done.status == SyncStatus.FAILED
    assert done.problems[0].startswith("manifests/web-1.yaml:")
    assert "Invalid YAML" in done.problems[0]
    assert not Instance.objects.exists()


def test_a_document_of_another_project_is_refused(repo, sync, other_project, owner):
    from tests.factories import MembershipFactory

    MembershipFactory(project=other_project, user=owner, role="admin")
    repo.commit({"manifests/web-1.yaml": WEB_1.replace("project: alpha", "project: beta")}, "x")
    done = sync()
    assert done.status == SyncStatus.FAILED
    assert done.problems == [
        "manifests/web-1.yaml:1: project: this repository applies to project alpha only, not beta."
    ]
    assert not Instance.objects.exists()


def test_a_folder_without_manifests_applies_nothing(repo, sync):
    repo.commit({"docs/readme.md": "hello"}, "No manifests")
    done = sync()
    assert done.status == SyncStatus.FAILED
    assert done.message.endswith(
        "No *.yaml or *.yml file under manifests/ at " + done.sha[:10] + "."
    )


def test_a_repository_that_cannot_be_fetched_says_so(source, sync):
    GitSource.objects.filter(pk=source.pk).update(url="file:///nowhere/at/all.git")
    done = sync()
    assert done.status == SyncStatus.FAILED
    assert done.message.startswith("Could not fetch main: ")
    assert "nowhere" in done.message


def test_drift_is_what_changed_in_the_console_since_the_last_sync(repo, sync, operator):
    repo.commit({"manifests/web-1.yaml": WEB_1}, "Add web-1")
    sync()
    instance_set_run_strategy(instance=Instance.objects.get(), actor=operator, strategy="Halted")
    done = sync()
    assert done.drift == ["~ instance alpha/web-1 (change)", "    ~ run_strategy Halted -> Manual"]
    assert done.changes == done.drift  # the repository wins: the sync sets it back
    assert Instance.objects.get().run_strategy == "Manual"


def test_an_instance_deleted_in_the_console_is_drift(repo, sync, owner):
    no_data_disk = WEB_1.replace("  disks:\n    - {name: web-1-data, size_gb: 10}\n", "")
    repo.commit({"manifests/web-1.yaml": no_data_disk}, "Add web-1")
    sync()
    instance_delete(instance=Instance.objects.get(), actor=owner)
    done = sync()
    assert done.drift[0] == "+ instance alpha/web-1 (create)"
    assert Instance.objects.filter(name="web-1").exists()


def test_drift_the_manifests_cannot_set_back_is_said_so(repo, sync, owner):
    repo.commit({"manifests/web-1.yaml": WEB_1}, "Add web-1")
    sync()
    instance_delete(instance=Instance.objects.get(), actor=owner)  # its data disk stays
    done = sync()
    assert done.drift[0] == "The manifests last applied no longer apply as they stand:"
    assert done.status == SyncStatus.FAILED and "web-1-data" in " ".join(done.problems)


def test_a_poll_records_only_news(repo, sync):
    repo.commit({"manifests/web-1.yaml": WEB_1}, "Add web-1")
    assert sync(SyncTrigger.SCHEDULE).status == SyncStatus.APPLIED
    assert sync(SyncTrigger.SCHEDULE) is None  # the same commit, no drift
    assert GitSource.objects.get().checked_at is not None
    Instance.objects.update(run_strategy="Halted")
    assert sync(SyncTrigger.SCHEDULE).drift != []


def test_a_source_already_syncing_is_not_synced_twice(source, sync):
    GitSource.objects.filter(pk=source.pk).update(sync_started_at=timezone.now())
    assert sync() is None
    assert not source.syncs.exists()


def test_a_sync_asked_for_while_one_ran_runs_again_after_it(source, sync, monkeypatch):
    from instances.gitops import sync as sync_module

    real_run = sync_module._run

    def run_and_meanwhile_a_push(source_row, record):  # type: ignore[no-untyped-def]
        GitSource.objects.filter(pk=source.pk).update(sync_requested_at=timezone.now())
        return real_run(source_row, record)

    monkeypatch.setattr(sync_module, "_run", run_and_meanwhile_a_push)
    before = OutboxMessage.objects.count()
    sync()
    sent = [(message.task, message.args) for message in OutboxMessage.objects.order_by("pk")]
    sent = sent[before:]
    assert sent == [("instances.gitops_sync", [source.pk, "manual", ""])]


def test_a_project_named_as_the_manifests_read_it_is_checked_so(db, project):
    """A number is read as text; a namespace with a cluster's prefix may name another project."""
    from instances.gitops.scope import foreign_documents
    from instances.models import Cluster
    from tests.factories import ProjectFactory

    ProjectFactory(slug="2024")
    ProjectFactory(slug="web")
    Cluster.objects.create(name="lab", api_url="https://k8s.example.com", namespace_prefix="zop-")
    vm = "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {{namespace: {}}}\n"
    sources = [
        ("a.yaml", WEB_1.replace("project: alpha", "project: 2024")),
        ("b.yaml", vm.format("zop-web")),
        ("c.yaml", vm.format("zop-alpha")),
    ]
    assert foreign_documents(sources=sources, slug="alpha") == [
        "a.yaml:1: project: this repository applies to project alpha only, not 2024.",
        "b.yaml:1: project: this repository applies to project alpha only, not zop-web.",
    ]


def test_a_billion_laughs_commit_is_refused_at_its_first_alias(repo, sync):
    repo.commit({"manifests/web-1.yaml": WEB_1.replace("spec:\n", "spec:\n" + LAUGHS)}, "Laugh")
    done = sync()
    assert done.status == SyncStatus.FAILED
    assert done.problems == [
        "manifests/web-1.yaml:6:12: Aliases (*l0) are not accepted: write the value out where "
        "it is used."
    ]
    assert not Instance.objects.exists()


def test_a_commit_nested_ten_thousand_deep_is_a_message_at_its_line(repo, sync):
    deep = WEB_1.replace("spec:\n", f"spec:\n  labels: {nested()}\n")
    repo.commit({"manifests/web-1.yaml": deep}, "Nest")
    done = sync()
    assert done.status == SyncStatus.FAILED and len(done.problems) == 1
    assert done.problems[0].startswith("manifests/web-1.yaml:5:")
    assert done.problems[0].endswith("nest over 64 levels deep here: keep to a few levels.")


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """The first file of each commit the syncs read the manifests of."""
    from instances.gitops import sync as sync_module

    read: list[str] = []
    real_apply = sync_module.manifest_apply

    def apply_and_count(**arguments):  # type: ignore[no-untyped-def]
        read.append(arguments["sources"][0][0])
        return real_apply(**arguments)

    monkeypatch.setattr(sync_module, "manifest_apply", apply_and_count)
    return read


def test_a_bomb_commit_is_read_again_on_sync_now_not_at_each_poll(repo, sync, source, reads):
    repo.commit({"manifests/web-1.yaml": WEB_1.replace("spec:\n", "spec:\n" + LAUGHS)}, "Laugh")
    refused = sync(SyncTrigger.SCHEDULE)  # news: a new commit
    assert (refused.status, refused.refused_content) == (SyncStatus.FAILED, True)
    assert sync(SyncTrigger.SCHEDULE) is None  # the same commit: left alone
    assert sync(SyncTrigger.SCHEDULE) is None
    assert len(reads) == 1 and source.syncs.count() == 1
    again = sync(SyncTrigger.MANUAL)  # Sync now
    assert again.status == SyncStatus.FAILED and len(reads) == 2
    assert sync(SyncTrigger.SCHEDULE) is None and len(reads) == 2
    fixed = repo.commit({"manifests/web-1.yaml": WEB_1}, "Defuse")
    done = sync(SyncTrigger.SCHEDULE)  # a new commit
    assert (done.status, done.sha, len(reads)) == (SyncStatus.APPLIED, fixed, 3)


def test_a_commit_naming_a_missing_subnet_is_applied_at_the_poll_after_it_is_made(
    repo, sync, source, project, reads
):
    from tests.factories import SubnetFactory

    sha = repo.commit({"manifests/web-1.yaml": WEB_1.replace("backend", "frontend")}, "Front")
    failed = sync(SyncTrigger.SCHEDULE)
    assert (failed.status, failed.refused_content) == (SyncStatus.FAILED, False)
    assert failed.problems[0].endswith("nics-0-subnet: Choose a subnet of this project.")
    assert sync(SyncTrigger.SCHEDULE) is None  # tried again; the same failure is no news
    assert len(reads) == 2 and source.syncs.count() == 1
    SubnetFactory(project=project, name="frontend", cidr_v4="10.30.0.0/24", gateway="10.30.0.1")
    done = sync(SyncTrigger.SCHEDULE)
    assert (done.status, done.sha, len(reads)) == (SyncStatus.APPLIED, sha, 3)
    assert Instance.objects.get().nics.get().subnet.name == "frontend"


def test_a_source_without_an_acting_user_is_synced_at_the_poll_after_it_gets_one(
    repo, sync, source, owner
):
    repo.commit({"manifests/web-1.yaml": WEB_1}, "Add web-1")
    GitSource.objects.filter(pk=source.pk).update(actor=None)
    failed = sync(SyncTrigger.SCHEDULE)
    assert failed.status == SyncStatus.FAILED and "no acting user" in failed.message
    assert sync(SyncTrigger.SCHEDULE) is None
    GitSource.objects.filter(pk=source.pk).update(actor=owner)
    assert sync(SyncTrigger.SCHEDULE).status == SyncStatus.APPLIED
