"""The guest agent's reports: every ZOPDAY_GUEST_REPORT_SECONDS each host's worker asks the agent
in each of its running instances for hostname, OS, addresses, memory and filesystems (and one
worker asks KubeVirt for its clusters' instances), and keeps the answer (models.GuestReport)
for the details page and the API.

What an agent says is the guest's to say: anyone with root in it may send anything, so it is
kept only in the shapes the pages and the API show, cut to size."""

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from instances.backends import CLUSTER_BACKENDS, LOCAL_BACKENDS, backend_named
from instances.backends.base import BackendError, GuestFacts
from instances.choices import PowerState
from instances.models import GuestReport, Instance

log = logging.getLogger(__name__)

MAX_ITEMS = 64  # interfaces, addresses of one, filesystems
MAX_TEXT = 255
BATCH_SIZE = 1000  # unchanged reports written in one UPDATE
BATCH_SECONDS = timedelta(seconds=1)
FIELDS = ("hostname", "os", "interfaces", "memory_total_kb", "memory_available_kb", "filesystems")


def guest_reports_host(host: str) -> None:
    """Ask the agent of every instance running on this host; one guest's silence or surprise
    does not keep the others unasked. A guest another run asked moments ago is skipped, so
    runs that overlap (a slow agent holds one up) do not ask the same guests twice."""
    running = Instance.objects.filter(
        host=host, backend__in=LOCAL_BACKENDS, power_state=PowerState.RUNNING
    )
    _ask_each(running)


def guest_reports_clusters() -> None:
    """Ask KubeVirt what the agents of the instances running on clusters report: API calls,
    which any worker makes."""
    _ask_each(Instance.objects.filter(backend__in=CLUSTER_BACKENDS, power_state=PowerState.RUNNING))


def _ask_each(running: "QuerySet[Instance]") -> None:
    """Claim the due guests in one UPDATE, ask each, and write only the reports whose facts or
    error changed; the unchanged ones get their new reported_at together, a batch at a time."""
    now = timezone.now()
    claimed = _claim_due(running, now)
    batch = _Unchanged()
    try:
        _ask(claimed, batch)
    finally:
        batch.flush()  # what was asked is kept, even if the round is cut short


def _ask(claimed: list[tuple[int, str, dict[str, Any]]], batch: "_Unchanged") -> None:
    """Each claimed guest asked in turn; a report written only when its word changed."""
    for pk, backend, stored in claimed:
        machine_id = Instance.machine_id_of(pk)
        asked_at = timezone.now()
        try:
            facts = backend_named(backend).guest_facts(machine_id)
        except BackendError as error:
            if stored.get("error") != error.message[:300]:
                GuestReport.objects.filter(pk=pk).update(error=error.message[:300])
            continue
        except Exception:
            log.exception("asking the guest agent of %s", machine_id)
            continue
        kept = _kept(facts)
        if stored == {**kept, "error": ""}:
            batch.add(pk, asked_at)
        else:
            GuestReport.objects.filter(pk=pk).update(**kept, reported_at=asked_at, error="")


def _claim_due(
    running: "QuerySet[Instance]", now: datetime
) -> list[tuple[int, str, dict[str, Any]]]:
    """The running instances whose guests this run claimed (asked_at set to `now`, which no
    other run's claim has): their pk, backend and stored facts and error. A guest another run
    asked moments ago is not due, so runs that overlap do not ask the same guests twice."""
    due = now - timedelta(seconds=settings.ZOPDAY_GUEST_REPORT_SECONDS / 2)
    GuestReport.objects.filter(instance__in=running, asked_at__lt=due).update(asked_at=now)
    unreported = running.filter(guest__isnull=True).values_list("pk", flat=True)
    GuestReport.objects.bulk_create(
        [GuestReport(instance_id=pk, asked_at=now) for pk in unreported], ignore_conflicts=True
    )
    rows = GuestReport.objects.filter(instance__in=running, asked_at=now).order_by()
    fields = (*FIELDS, "error")
    return [
        (pk, backend, dict(zip(fields, values, strict=True)))
        for pk, backend, *values in rows.values_list("pk", "instance__backend", *fields)
    ]


class _Unchanged:
    """Reports whose guests said the same again: reported_at moves on in one UPDATE per
    BATCH_SIZE guests or BATCH_SECONDS, so a slow round's pages are never far behind."""

    def __init__(self) -> None:
        self.pks: list[int] = []
        self.since: datetime | None = None

    def add(self, pk: int, asked_at: datetime) -> None:
        self.since = self.since or asked_at  # the batch's oldest ask: never later than the facts
        self.pks.append(pk)
        if len(self.pks) >= BATCH_SIZE or timezone.now() - self.since > BATCH_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self.pks:  # never back in time, past a report written meanwhile
            rows = GuestReport.objects.filter(pk__in=self.pks, reported_at__lt=self.since)
            rows.update(reported_at=self.since)
        self.pks, self.since = [], None


def guest_report(instance: Instance) -> GuestReport:
    """Ask the instance's guest agent now and keep what it says, or why it said nothing."""
    now = timezone.now()
    try:
        facts = backend_named(instance.backend).guest_facts(instance.machine_id)
    except BackendError as error:
        report, _ = GuestReport.objects.update_or_create(
            instance=instance, defaults={"error": error.message[:300], "asked_at": now}
        )
        return report
    kept = {**_kept(facts), "reported_at": now, "error": "", "asked_at": now}
    report, _ = GuestReport.objects.update_or_create(instance=instance, defaults=kept)
    return report


def _kept(facts: GuestFacts) -> dict[str, Any]:
    return {
        "hostname": _text(facts.hostname),
        "os": _text(facts.os),
        "interfaces": [
            {
                "name": _text(interface.name),
                "mac": _text(interface.mac),
                "addresses": [_text(address) for address in interface.addresses[:MAX_ITEMS]],
                "carrier": interface.carrier if isinstance(interface.carrier, bool) else None,
            }
            for interface in facts.interfaces[:MAX_ITEMS]
        ],
        "memory_total_kb": _count(facts.memory_total_kb) or 0,
        "memory_available_kb": _count(facts.memory_available_kb) or 0,
        "filesystems": [
            {
                "mountpoint": _text(fs.get("mountpoint")),
                "type": _text(fs.get("type")),
                "device": _text(fs.get("device")),
                "total_bytes": _count(fs.get("total_bytes")),
                "used_bytes": _count(fs.get("used_bytes")),
            }
            for fs in facts.filesystems[:MAX_ITEMS]
            if isinstance(fs, dict)
        ],
    }


def _text(value: object) -> str:
    return str(value)[:MAX_TEXT] if value is not None else ""


def _count(value: object) -> int | None:
    """A whole number of bytes or kB, or None: a guest may say anything."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        return None
    return value
