"""ZopNight stop schedules of Fixed pools, as rules: which there are, when they call for the VMs,
and what makes one wrong. The VMs run on weekdays' working hours and are stopped on weeknights
and weekends, in the job's time zone; services.schedules applies them."""

from datetime import datetime
from functools import cache
from zoneinfo import ZoneInfo, available_timezones

from django.core.exceptions import ValidationError

WEEKNIGHTS_AND_WEEKENDS = "weeknights-weekends"
SCHEDULES = {
    "": "None: the VMs run 24×7",
    WEEKNIGHTS_AND_WEEKENDS: (
        "Stopped on weeknights and weekends (on 08:00–20:00, Monday to Friday)"
    ),
}
ON_FROM, ON_UNTIL = 8, 20  # hours of a weekday the VMs run
WEEKDAYS = range(5)  # Monday to Friday
NOT_ZONES = {"localtime", "Factory", "posixrules"}  # files of a zoneinfo folder, not places


@cache
def time_zones() -> frozenset[str]:
    return frozenset(available_timezones() - NOT_ZONES)


def schedule_errors(schedule: str, tz: str) -> dict[str, str]:
    errors = {}
    if schedule not in SCHEDULES:
        choices = ", ".join(repr(name) for name in SCHEDULES)
        errors["schedule"] = f"Unknown schedule {schedule[:40]!r}: use one of {choices}."
    if tz not in time_zones():
        errors["schedule_tz"] = (
            f"{tz[:40]!r} is not a time zone: give one such as Europe/Paris or UTC."
        )
    return errors


def validated(schedule: str, tz: str) -> tuple[str, str]:
    """The schedule and time zone, or ValidationError at the field that is wrong."""
    tz = tz.strip() or "UTC"
    if errors := schedule_errors(schedule, tz):
        raise ValidationError(errors)
    return schedule, tz


def scheduled_on(schedule: str, tz: str, now: datetime) -> bool:
    """Whether the schedule has the VMs running at `now`."""
    if not schedule:
        return True
    local = now.astimezone(ZoneInfo(tz.strip() or "UTC"))  # an empty time zone is UTC
    return local.weekday() in WEEKDAYS and ON_FROM <= local.hour < ON_UNTIL
