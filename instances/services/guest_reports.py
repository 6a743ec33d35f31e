"""The guest agent's reports: every ZOPDAY_GUEST_REPORT_SECONDS each host's worker asks the agent
in each of its running instances for hostname, addresses, memory and filesystems, and keeps the
answer (models.GuestReport) for the details page and the API."""

import logging
from dataclasses import asdict

from django.utils import timezone

from instances.backends import LOCAL_BACKENDS, backend_named
from instances.backends.base import BackendError
from instances.choices import PowerState
from instances.models import GuestReport, Instance

log = logging.getLogger(__name__)


def guest_reports_host(host: str) -> None:
    """Ask the agent of every instance running on this host; one guest's silence or surprise
    does not keep the others unasked."""
    running = Instance.objects.filter(
        host=host, backend__in=LOCAL_BACKENDS, power_state=PowerState.RUNNING
    )
    for instance in running:
        try:
            guest_report(instance)
        except Exception:
            log.exception("asking the guest agent of %s", instance.machine_id)


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
    report, _ = GuestReport.objects.update_or_create(
        instance=instance,
        defaults={
            "hostname": facts.hostname,
            "interfaces": [asdict(interface) for interface in facts.interfaces],
            "memory_total_kb": facts.memory_total_kb,
            "memory_available_kb": facts.memory_available_kb,
            "filesystems": list(facts.filesystems),
            "reported_at": now,
            "error": "",
            "asked_at": now,
        },
    )
    return report
