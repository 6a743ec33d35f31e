"""The backend registry: which implementation runs an instance's machine.

`qemu` is built in: its machines are processes on the console's own hypervisor hosts. `kubevirt`
runs them on a Kubernetes cluster; this app registers it when it is ready. Other apps register
backends for machines that live elsewhere (provisioning registers `aws` for the VMs its jobs
create) from their AppConfig.ready, so this app never imports them.
"""

from collections.abc import Callable
from functools import cache

from django.conf import settings

from instances.backends.base import Backend, BackendError, MachineFact

# Backends whose machines are processes on the console's own hosts: their work goes to the
# host's queue, and disks, interfaces, run strategies and consoles are managed here.
LOCAL_BACKENDS = frozenset({"qemu"})
# Backends whose machines this console manages (disks, interfaces, run strategy, consoles) on
# a platform of their own, whose work is API calls any worker can make.
CLUSTER_BACKENDS = frozenset({"kubevirt"})

_factories: dict[str, Callable[[], Backend]] = {}


def register_backend(name: str, factory: Callable[[], Backend]) -> None:
    """Make backend_named(name) build its backend with factory (called once per process)."""
    _factories[name] = factory
    backend_named.cache_clear()


def backend_available(name: str) -> bool:
    return name in LOCAL_BACKENDS or name in _factories


def is_local_backend(name: str) -> bool:
    return name in LOCAL_BACKENDS


def is_managed_backend(name: str) -> bool:
    """The console sets the machine's disks, interfaces and run strategy, and opens its
    consoles; a cloud VM's (aws) are its provisioning job's."""
    return name in LOCAL_BACKENDS or name in CLUSTER_BACKENDS


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
    factory = _factories.get(name)
    if factory is not None:
        return factory()
    raise BackendError(f"There is no backend called {name!r}.")


def machine_facts(name: str, machine_id: str) -> list[MachineFact]:
    """For the details page: what a registered backend adds about its machine."""
    if name not in _factories:  # qemu has nothing to add: no backend built for a page
        return []
    return backend_named(name).machine_facts(machine_id)


__all__ = [
    "CLUSTER_BACKENDS",
    "LOCAL_BACKENDS",
    "Backend",
    "BackendError",
    "MachineFact",
    "backend_available",
    "backend_named",
    "is_local_backend",
    "is_managed_backend",
    "machine_facts",
    "register_backend",
]
