"""GCP stepCreateDNSRecord: an A record for the load balancer in a Cloud DNS zone, the user's
own or one the job makes (and its detach then deletes)."""

from typing import Any

from provisioning.clouds.context import StepContext
from provisioning.clouds.errors import CloudError
from provisioning.clouds.gcp.base import GcpBase
from provisioning.clouds.gcp.sdk import google_api, mapped
from provisioning.infra import InfraConfig


class GcpDns(GcpBase):
    def _dns(self, method: str, path: str, **kwargs: Any) -> dict[str, Any] | None:
        return google_api(
            self.account, "dns", method, f"dns/v1/projects/{self.project}/{path}", **kwargs
        )

    def _managed_zone(self, config: InfraConfig, ctx: StepContext, create: bool) -> str | None:
        """The Cloud DNS zone the name goes in: the user's own, or (create) one the job makes,
        named for its token, which teardown then deletes."""
        dns_name = config.dns_name.split(".", 1)[1].rstrip(".") + "."
        ours = f"zopday-{ctx.token}-zone"
        listed = (self._dns("GET", "managedZones", params={"dnsName": dns_name}) or {}).get(
            "managedZones", []
        )
        # The answer checked here too: a server that ignores the filter must not hand the job
        # (and its teardown) another zone.
        found = [zone for zone in listed if zone.get("dnsName") == dns_name]
        if found:
            zone = str(found[0]["name"])
            if zone == ours:
                config.resources["hosted_zone_created"] = zone
            return zone
        if not create:
            return None
        try:
            self._dns(
                "POST", "managedZones",
                json={"name": ours, "dnsName": dns_name, "description": f"ZopDay {ctx.name}",
                      "visibility": "public", "labels": self._labels(ctx, "dns-zone")},
            )  # fmt: skip
            ctx.log(f"created Cloud DNS zone {dns_name}")
        except CloudError as error:
            if error.code != "alreadyExists":
                raise
        config.resources["hosted_zone_created"] = ours
        return ours

    def _a_records(self, zone: str, config: InfraConfig) -> list[dict[str, Any]]:
        name = config.dns_name.rstrip(".") + "."
        found = self._dns("GET", f"managedZones/{zone}/rrsets", params={"name": name, "type": "A"})
        return [r for r in (found or {}).get("rrsets", []) if r["name"] == name]

    @mapped
    def create_dns_record(self, config: InfraConfig, ctx: StepContext) -> str:
        if not config.dns_name:
            return "No DNS name was asked for: the load balancer answers on its own address."
        zone = self._managed_zone(config, ctx, create=True)
        assert zone is not None
        self._record(config, ctx, "hosted_zone", zone)
        address = config.resources["load_balancer_dns"]
        record = {"name": config.dns_name.rstrip(".") + ".", "type": "A", "ttl": 300,
                  "rrdatas": [address]}  # fmt: skip
        existing = self._a_records(zone, config)
        if any(r.get("rrdatas") != [address] for r in existing):
            # Someone else's record (or an earlier load balancer's): never replaced silently.
            raise CloudError(
                f"The zone {zone} already has an A record for {record['name']} pointing at "
                f"{', '.join(existing[0].get('rrdatas', []))}: remove it, or choose another DNS "
                "name."
            )
        if not existing:
            self._dns("POST", f"managedZones/{zone}/changes", json={"additions": [record]})
        self._record(config, ctx, "dns_record", config.dns_name)
        return f"{config.dns_name} → {address}."
