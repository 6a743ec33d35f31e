"""What a backend's machines cannot do that the console offers for their disks (changing a
CD-ROM's media while running): the row refuses it, with the reason, before any work."""

from instances.allowed import YES, Allowed
from instances.backends import backend_available, backend_named
from instances.choices import PowerState
from instances.models import Disk


def _backend(name: str) -> object | None:
    return backend_named(name) if name and backend_available(name) else None


def _title(backend: object) -> str:
    return str(getattr(backend, "title", getattr(backend, "name", "")))


def media_change(disk: Disk) -> Allowed:
    """Whether the drive's media can change now: some backends change it only while stopped."""
    instance = disk.instance
    if instance is None or instance.power_state != PowerState.RUNNING:
        return YES
    backend = _backend(instance.backend)
    if backend is None or getattr(backend, "changes_media_live", True):
        return YES
    return Allowed(
        False,
        f"{_title(backend)} cannot change a CD-ROM's media while {instance.name} runs: stop it, "
        "then change it.",
    )
