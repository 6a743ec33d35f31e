"""Instance names other apps have promised: provisioning registers its jobs' VM names
(`<job>-<n>`) here, so an instance created by hand never takes one (the dependency points from
provisioning to instances, as for the cloud backends)."""

from collections.abc import Callable

from instances.models import Project

NameCheck = Callable[[Project, str], str]  # (project, name) -> why it is taken, or ""
_checks: list[NameCheck] = []


def register_name_check(check: NameCheck) -> None:
    if check not in _checks:
        _checks.append(check)


def name_promised(project: Project, name: str) -> str:
    """Why this instance name is promised to something else in the project, or ""."""
    for check in _checks:
        if why := check(project, name):
            return why
    return ""
