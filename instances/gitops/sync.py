"""One sync of a git source, claimed so that a source never syncs twice at once:

1. fetch the branch and read the manifests under the path at its head commit;
2. find drift: plan the manifests the last good sync applied against the console as it is now;
3. apply the commit's manifests (all or nothing) as the source's acting user;
4. record a GitSync row: commit, files changed, diff lines, problems, drift; audit it.

A scheduled poll records a row only when there is something to say: a new commit, drift, or a
failure other than the last one. A commit refused for what it holds (unreadable YAML, its bounds,
its shape) is left alone until a new commit or Sync now; any other failure is tried again at each
poll. Syncs requested while one ran are run again after it.
"""

import logging
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from instances.choices import Outcome, SyncStatus, SyncTrigger
from instances.gitops import git
from instances.gitops.drift import drift_find
from instances.gitops.scope import foreign_documents
from instances.manifests import ManifestInvalid, Plan, manifest_apply
from instances.models import GitSource, GitSync
from instances.services.audit import audit_record
from instances.services.queueing import send_on_commit

log = logging.getLogger(__name__)

SYNC_TASK = "instances.gitops_sync"


def cache_folder(source: GitSource) -> Path:
    return Path(settings.ZOPDAY_GITOPS_DIR) / f"source-{source.pk}.git"


def _claim(source_id: int) -> bool:
    """Take the source for this sync with a conditional UPDATE; a claim older than a task's
    time limit belongs to a worker that died and is taken over."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)
    return bool(
        GitSource.objects.filter(pk=source_id)
        .filter(Q(sync_started_at__isnull=True) | Q(sync_started_at__lt=stale))
        .update(sync_started_at=now, sync_requested_at=None)
    )


def _release(source_id: int) -> None:
    """Free the source; a sync requested meanwhile (its task found the source taken) runs now."""
    GitSource.objects.filter(pk=source_id).update(sync_started_at=None, checked_at=timezone.now())
    requested = GitSource.objects.filter(pk=source_id, sync_requested_at__isnull=False).exists()
    if requested:
        send_on_commit(
            SYNC_TASK, source_id, SyncTrigger.MANUAL, "", queue=settings.ZOPDAY_CLOUD_QUEUE
        )


def git_source_sync(*, source_id: int, trigger: str, requested_by: str = "") -> GitSync | None:
    """Sync the source now; None when another sync holds it or a poll found nothing to say."""
    if not _claim(source_id):
        return None
    try:
        source = GitSource.objects.select_related("project", "actor").get(pk=source_id)
        sync = GitSync(source=source, trigger=trigger, requested_by=requested_by)
        if trigger != SyncTrigger.SCHEDULE:
            sync.save()  # the page shows it running
        try:
            worth_recording = _run(source, sync)
        except Exception:
            log.exception("git source %s: the sync failed", source_id)
            sync.status = SyncStatus.FAILED
            sync.message = "The sync stopped on an unexpected error; the worker's log says which."
            worth_recording = True
        if sync.trigger == SyncTrigger.SCHEDULE and _failed_as_last(source, sync):
            worth_recording = False
        if worth_recording or sync.pk:
            sync.finished_at = timezone.now()
            sync.save()
            _audit(source, sync)
            log.info("git source %s: %s", source.pk, sync.message)
            return sync
        return None
    finally:
        _release(source_id)


def _run(source: GitSource, sync: GitSync) -> bool:
    """Fill the sync in; False when a scheduled poll has nothing to record."""
    cache = cache_folder(source)
    remote = git.Remote(source.url, source.auth, source.credential)
    try:
        commit = git.fetch(cache=cache, remote=remote, branch=source.branch)
    except git.GitError as error:
        return _failed_fetch(source, sync, error)
    sync.sha, sync.subject, sync.author = commit.sha, commit.subject, commit.author
    if sync.trigger == SyncTrigger.SCHEDULE and _refused_last(source, commit.sha):
        return False
    actor = source.actor
    if actor is None:
        sync.status = SyncStatus.FAILED
        sync.message = "Nothing applied: the source has no acting user; an owner saves it again."
        return True
    sync.drift = drift_find(applied=[tuple(s) for s in source.applied_sources], actor=actor)
    if sync.trigger == SyncTrigger.SCHEDULE and commit.sha == source.applied_sha and not sync.drift:
        return False
    sync.files = _files(cache, source, commit)
    try:
        sources = git.manifests(cache=cache, sha=commit.sha, path=source.path)
    except git.GitError as error:
        sync.status, sync.problems = SyncStatus.FAILED, [error.message]
        sync.refused_content = not error.retryable  # no manifests, too many, too large
        sync.message = f"Nothing applied from {commit.sha[:10]}: {error.message}"
        return True
    plans: list[Plan] = []
    sync.problems = foreign_documents(sources=sources, slug=source.project.slug)
    if not sync.problems:
        try:
            plans = manifest_apply(sources=sources, actor=actor, dry_run=False)
        except ManifestInvalid as invalid:
            sync.problems = [str(problem) for problem in invalid.problems]
            sync.refused_content = invalid.in_the_text
    if sync.problems:
        sync.status = SyncStatus.FAILED
        count = len(sync.problems)
        sync.message = (
            f"Nothing applied from {commit.sha[:10]}: {count} problem{'s' * (count != 1)}."
        )
        return True
    _applied(source, sync, plans, sources)
    return True


def _refused_last(source: GitSource, sha: str) -> bool:
    """The last sync recorded refused this commit for what it holds: reading it again would
    fail again (and a hostile commit would hold a worker at every poll)."""
    last = source.syncs.order_by("-started_at", "-id").first()
    return last is not None and last.sha == sha and last.refused_content


def _failed_as_last(source: GitSource, sync: GitSync) -> bool:
    """The sync failed just as the last one recorded did: no news for a poll to record."""
    last = source.syncs.exclude(pk=sync.pk).order_by("-started_at", "-id").first()
    return (
        sync.status == SyncStatus.FAILED
        and last is not None
        and last.status == SyncStatus.FAILED
        and (last.sha, last.message, last.problems, last.drift)
        == (sync.sha, sync.message, sync.problems, sync.drift)
    )


def _files(cache: Path, source: GitSource, commit: git.Commit) -> list[str]:
    if not source.applied_sha:
        return ["(first sync)"]
    if source.applied_sha == commit.sha:
        return []
    changed = git.files_changed(
        cache=cache, old=source.applied_sha, new=commit.sha, path=source.path
    )
    return changed if changed is not None else [f"(commit {source.applied_sha[:10]} is gone)"]


def _applied(
    source: GitSource, sync: GitSync, plans: list[Plan], sources: list[tuple[str, str]]
) -> None:
    counts = {verb: sum(plan.verb == verb for plan in plans) for verb in ("create", "change")}
    unchanged = len(plans) - sum(counts.values())
    sync.changes = [line for plan in plans if plan.verb != "unchanged" for line in plan.diff()]
    short = sync.sha[:10]
    if sync.changes:
        sync.status = SyncStatus.APPLIED
        sync.message = (
            f"Applied {short}: {counts['create']} created, {counts['change']} changed, "
            f"{unchanged} unchanged."
        )
    else:
        sync.status = SyncStatus.UNCHANGED
        already = "is already applied" if sync.sha == source.applied_sha else "changes no object"
        sync.message = f"No changes: {short} {already} ({unchanged} unchanged)."
    GitSource.objects.filter(pk=source.pk).update(applied_sha=sync.sha, applied_sources=sources)
    source.applied_sha, source.applied_sources = sync.sha, sources


def _failed_fetch(source: GitSource, sync: GitSync, error: git.GitError) -> bool:
    sync.status, sync.problems = SyncStatus.FAILED, [error.message]
    sync.message = f"Could not fetch {source.branch}: {error.message}"
    return True


def _audit(source: GitSource, sync: GitSync) -> None:
    with transaction.atomic():
        audit_record(
            actor=source.actor,
            action="gitsource.sync",
            project=source.project,
            target=source,
            outcome=Outcome.FAILURE if sync.status == SyncStatus.FAILED else Outcome.SUCCESS,
            message=sync.message,
            detail={"sha": sync.sha, "trigger": sync.trigger, "sync": sync.pk},
        )
