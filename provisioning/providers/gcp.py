"""GCP: arrives next, in its own issue (google-cloud-compute, MIGs, OSConfig exec)."""

from provisioning.providers.base import UnavailableProvider

GCP_NEXT = (
    "Invalid: GCP provisioning arrives next (managed instance groups with OSConfig exec); "
    "use AWS for now."
)


class GcpProvider(UnavailableProvider):
    name = "gcp"
    reason = GCP_NEXT
