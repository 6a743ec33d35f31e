"""The backend registry: which implementation runs an instance's machine."""

from functools import cache

from django.conf import settings

from instances.backends.base import Backend, BackendError


@cache
def backend_named(name: str) -> Backend:
    if name == "qemu":
        from instances.backends.qemu import QemuBackend

        return QemuBackend(
            settings.ZOPDAY_MACHINES_DIR,
            images=settings.ZOPDAY_IMAGES_DIR,
            accel=settings.ZOPDAY_QEMU_ACCEL,
            network_mode=settings.ZOPDAY_NETWORK_MODE,
            namespace=settings.ZOPDAY_NETNS,
        )
    raise BackendError(f"There is no backend called {name!r}.")


__all__ = ["Backend", "BackendError", "backend_named"]
