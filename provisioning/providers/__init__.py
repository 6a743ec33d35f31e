"""The provider registry: which implementation provisions with a cloud account."""

from provisioning.choices import Provider as ProviderName
from provisioning.models import CloudAccount
from provisioning.providers.base import CloudError, Provider, StepContext


def provider_for(account: CloudAccount, region: str = "") -> Provider:
    region = region or account.default_region
    if account.provider == ProviderName.AWS:
        from provisioning.providers.aws import AwsProvider

        return AwsProvider(account, region)
    if account.provider == ProviderName.AZURE:
        from provisioning.providers.azure import AzureProvider

        return AzureProvider()  # type: ignore[return-value]
    from provisioning.providers.gcp import GcpProvider

    return GcpProvider(account, region)


__all__ = ["CloudError", "Provider", "StepContext", "provider_for"]
