"""GCP: GCE VMs in a VPC network with Cloud NAT, exec through IAP with OS Login. Google's SDK is
imported by `steps` and `vm_backend` only, when first used."""

import shlex
from typing import TYPE_CHECKING

from provisioning.clouds.base import CloudSteps
from provisioning.clouds.gcp import plan, rules

if TYPE_CHECKING:
    from provisioning.clouds.power import CloudVmBackend
    from provisioning.models import CloudAccount

GCE_GUEST_ATTRIBUTE = (
    "http://metadata.google.internal/computeMetadata/v1/instance/guest-attributes/zopday/bootstrap"
)


class GcpCloud:
    name = "gcp"
    label = "GCP"
    choice_label = "GCP"
    refusal = ""
    exec_mode = "OSConfig"
    region_pattern = rules.REGION
    region_example = "us-central1"
    prices = rules.PRICES
    image_rules = rules.IMAGE
    existing_network_rules = rules.EXISTING_NETWORK
    plan = staticmethod(plan.plan)
    account_credentials = staticmethod(rules.account_credentials)
    secret_check = staticmethod(rules.secret_check)

    def bootstrap_commands(self, sentinel: str) -> list[list[str]]:
        """The sentinel also as a guest attribute, which stepCreateVMs reads through the API."""
        return [
            [
                "sh",
                "-c",
                f"test -f {shlex.quote(sentinel)} && curl -sf -X PUT --data ready "
                f"-H 'Metadata-Flavor: Google' {GCE_GUEST_ATTRIBUTE}",
            ]
        ]

    def steps(self, account: "CloudAccount", region: str) -> CloudSteps:
        from provisioning.clouds.gcp.steps import GcpSteps

        return GcpSteps(account, region)

    def vm_backend(self) -> "CloudVmBackend":
        from provisioning.clouds.gcp.power import GcpVmBackend

        return GcpVmBackend()


GCP = GcpCloud()
