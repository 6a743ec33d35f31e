"""The guest agent's reports: every ZOPDAY_GUEST_REPORT_SECONDS each host's worker asks the agent
in each of its running instances for hostname, OS, addresses, memory and filesystems (and one
worker asks KubeVirt for its clusters' instances), and keeps the answer (models.GuestReport)
for the details page and the API.

What an agent says is the guest's to say: anyone with root in it may send anything, so it is
kept only in the shapes the pages and the API show, cut to size."""

import logging
from datetime import timedelta
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
    for instance in running:
        if not _claim(instance):
            continue
        try:
            guest_report(instance)
        except Exception:
            log.exception("asking the guest agent of %s", instance.machine_id)


def _claim(instance: Instance) -> bool:
    now = timezone.now()
    due = now - timedelta(seconds=settings.ZOPDAY_GUEST_REPORT_SECONDS / 2)
    if GuestReport.objects.filter(instance=instance, asked_at__lt=due).update(asked_at=now):
        return True
    _, created = GuestReport.objects.get_or_create(instance=instance, defaults={"asked_at": now})
    return created


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
