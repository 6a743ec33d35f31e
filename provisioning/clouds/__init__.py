"""The clouds the console provisions on, keyed by provider: a new cloud is a package and a line
in CLOUDS."""

from instances.backends import register_backend
from provisioning.clouds.aws import AWS
from provisioning.clouds.azure import AZURE
from provisioning.clouds.base import Cloud, CloudSteps
from provisioning.clouds.gcp import GCP
from provisioning.models import CloudAccount

CLOUDS: dict[str, Cloud] = {cloud.name: cloud for cloud in (AWS, GCP, AZURE)}
DEFAULT = AWS  # the wizard's first choice, and the rules of a provider nobody knows


def provider_choices() -> list[tuple[str, str]]:
    """The provider fields' choices: the registry's, so a new cloud needs no migration."""
    return [(cloud.name, cloud.label) for cloud in CLOUDS.values()]


def exec_mode_choices() -> list[tuple[str, str]]:
    """Each cloud's IAM-gated exec channel, the only interactive access to its VMs."""
    return [
        (cloud.exec_mode, f"{cloud.exec_mode} ({cloud.label}{', gated' if cloud.refusal else ''})")
        for cloud in CLOUDS.values()
    ]


def cloud_for(provider: str) -> Cloud:
    return CLOUDS.get(provider, DEFAULT)


def available() -> list[Cloud]:
    """The clouds the console provisions on now."""
    return [cloud for cloud in CLOUDS.values() if not cloud.refusal]


def steps_for_account(account: CloudAccount, region: str = "") -> CloudSteps:
    """The pipeline calls of the account's cloud, in `region` (the account's default if none)."""
    return cloud_for(account.provider).steps(account, region or account.default_region)


def register_vm_backends() -> None:
    """Each available cloud's VMs as a compute backend of the instances app; its SDK is
    imported when the backend is first used."""
    for cloud in available():
        register_backend(cloud.name, cloud.vm_backend)
