"""Compute backends for the VMs provisioning jobs create, so that they can be operated as
instances of their project.

ProvisioningConfig.ready registers them with the instances app's backend registry: the
dependency points from provisioning to instances, and the SDK is imported only when a backend is
first used.
"""

from typing import TYPE_CHECKING

from instances.backends import Backend, register_backend
from provisioning.choices import Provider

if TYPE_CHECKING:
    from provisioning.backends.cloud import CloudVmBackend


def backend_class(provider: str) -> "type[CloudVmBackend]":
    """The backend of a cloud's VMs (its SDK is imported now, not before)."""
    if provider == Provider.GCP:
        from provisioning.backends.gcp import GcpVmBackend

        return GcpVmBackend
    from provisioning.backends.aws import AwsVmBackend

    return AwsVmBackend


def _aws() -> Backend:
    return backend_class(Provider.AWS)()


def _gcp() -> Backend:
    return backend_class(Provider.GCP)()


def register_backends() -> None:
    register_backend(Provider.AWS.value, _aws)
    register_backend(Provider.GCP.value, _gcp)
