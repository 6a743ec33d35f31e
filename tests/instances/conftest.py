"""Fixtures of the instances tests."""

import pytest

from instances import backends
from instances.choices import PowerState
from instances.models import Instance
from instances.services import reconciler
from instances.services.instances import instance_create
from tests.factories import instance_request
from tests.instances.platforms import PLATFORMS, Platform, platform_for
from tests.instances.standins import LaunchingBackend


@pytest.fixture
def on_backend(monkeypatch, project, operator, subnet):
    """on_backend(backend, **fields) -> a new instance (web-1) on that backend object (a stand-in
    with a `name`), its row updated with fields (e.g. power_state)."""

    def make(backend: object, **fields: object) -> Instance:
        name = backend.name  # type: ignore[attr-defined]
        monkeypatch.setattr(backends, "_factories", {name: lambda: backend})
        backends.backend_named.cache_clear()
        instance = instance_create(
            project=project, actor=operator, request=instance_request(subnet)
        )
        Instance.objects.filter(pk=instance.pk).update(backend=name, **fields)
        instance.refresh_from_db()
        return instance

    yield make
    backends.backend_named.cache_clear()


@pytest.fixture
def launching_is_local(monkeypatch):
    """The stand-in counts as a hypervisor on this host: the reconciler looks at its machines
    and host tasks go to the instance's host queue."""
    local = frozenset({"launching"})
    monkeypatch.setattr(reconciler, "LOCAL_BACKENDS", local)
    monkeypatch.setattr(backends, "LOCAL_BACKENDS", local)


@pytest.fixture
def starting(on_backend):
    def make(meanwhile) -> tuple[LaunchingBackend, Instance]:  # type: ignore[no-untyped-def]
        backend = LaunchingBackend(meanwhile)
        return backend, on_backend(backend, power_state=PowerState.STARTING)

    return make


@pytest.fixture(params=PLATFORMS)
def platform(request) -> Platform:
    """Each behaviour test that asks for it runs on this console's QEMU hosts and on KubeVirt."""
    return platform_for(request)
