"""Compute backends for the VMs provisioning jobs create, so that they can be operated as
instances of their project.

ProvisioningConfig.ready registers them with the instances app's backend registry: the
dependency points from provisioning to instances, and the SDK is imported only when a backend is
first used.
"""

from instances.backends import Backend, register_backend
from provisioning.choices import Provider


def _aws() -> Backend:
    from provisioning.backends.aws import AwsVmBackend

    return AwsVmBackend()


def register_backends() -> None:
    register_backend(Provider.AWS.value, _aws)
