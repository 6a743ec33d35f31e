"""The schedule: beat's poll asks for a sync of every source not syncing now."""

import pytest
from django.conf import settings
from django.utils import timezone

from instances import tasks
from instances.models import GitSource
from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db


def test_beat_polls_every_source_on_the_schedule():
    assert settings.CELERY_BEAT_SCHEDULE["gitops-poll"]["task"] == tasks.gitops_poll.name


def test_the_poll_queues_a_sync_of_each_source_not_syncing(source, monkeypatch):
    busy = GitSource.objects.create(
        project=ProjectFactory(slug="busy"), url="file:///x.git", sync_started_at=timezone.now()
    )
    sent = []
    monkeypatch.setattr(tasks.gitops_sync, "apply_async", lambda args, **options: sent.append(args))
    tasks.gitops_poll()
    assert sent == [[source.pk, "schedule"]]
    assert busy.pk not in [args[0] for args in sent]
