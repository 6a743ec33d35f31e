"""Azure: a clean stub until Azure VMSS provisioning is generally available."""

from provisioning.providers.base import UnavailableProvider

AZURE_INVALID = (
    "Invalid: Azure VMSS provisioning is in preview, not yet GA. The Azure exec channel "
    "(AzureRunCmd) is gated on GA too; both arrive in the console when Azure VMSS reaches GA."
)


class AzureProvider(UnavailableProvider):
    name = "azure"
    reason = AZURE_INVALID
