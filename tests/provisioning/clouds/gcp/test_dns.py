"""The Cloud DNS zone of a GCP job: what a listing answers is checked, not trusted."""

from types import SimpleNamespace

import pytest

from provisioning.clouds.context import StepContext
from provisioning.clouds.gcp.dns import GcpDns
from provisioning.infra import InfraConfig


class ListsEveryZone(GcpDns):
    """A Cloud DNS that ignores the dnsName filter, as a double or a proxy might."""

    zones = [
        {"name": "zopday-othertoken-zone", "dnsName": "other.example."},
        {"name": "users-own-zone", "dnsName": "example.com."},
    ]

    def __init__(self) -> None:
        super().__init__(SimpleNamespace(gcp_project="zopday-sandbox"), "us-central1")

    def _dns(self, method, path, **kwargs):
        assert (method, path) == ("GET", "managedZones")
        return {"managedZones": self.zones}


@pytest.mark.parametrize("create", [True, False])
def test_a_zone_listed_for_another_dns_name_is_never_the_jobs(create):
    config = InfraConfig(provider="gcp", dns_name="shop.example.com")
    ctx = StepContext(job_id=1, token="jobtoken", name="web", tags={})

    assert ListsEveryZone()._managed_zone(config, ctx, create=create) == "users-own-zone"
    assert "hosted_zone_created" not in config.resources  # the user's zone: never deleted
