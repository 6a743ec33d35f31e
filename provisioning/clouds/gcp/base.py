"""What the GCP steps share: the account's project and region, cached clients,
labels, and insert / delete / wait helpers over Compute operations."""

import re
from collections.abc import Callable
from functools import partial
from typing import Any

from google.cloud import compute_v1

from provisioning.clouds.context import StepContext
from provisioning.clouds.errors import CloudError
from provisioning.clouds.gcp.sdk import (
    client_for,
    exists_already,
    key_info,
    not_found,
    short,
    wait_operation,
)
from provisioning.infra import InfraConfig
from provisioning.models import CloudAccount

SETTLE_TIMEOUT = 900


def gce_labels(tags: dict[str, str]) -> dict[str, str]:
    """Tags as GCE labels: lowercase keys and values of [a-z0-9_-], "zopday:job" → "zopday-job"."""

    def clean(text: str) -> str:
        return re.sub(r"[^a-z0-9_-]", "-", text.lower())[:63]

    return {clean(key): clean(value) for key, value in tags.items()}


def project_of(account: CloudAccount) -> str:
    """The GCP project the account provisions in: the one named, or its key's own."""
    return account.gcp_project or str(key_info(account).get("project_id", ""))


class GcpBase:
    """The account, project and region the steps work in, and their helpers."""

    def __init__(self, account: CloudAccount, region: str) -> None:
        self.account = account
        self.region = region
        self.project = project_of(account)

    def client(self, client_class: type) -> Any:
        return client_for(self.account, client_class)

    # ---- helpers ----------------------------------------------------------------------------
    def _labels(self, ctx: StepContext, role: str) -> dict[str, str]:
        return gce_labels({**ctx.tags, "zopday:role": role})

    def _record(self, config: InfraConfig, ctx: StepContext, kind: str, value: str) -> str:
        if config.resources.get(kind) != value:
            config.resources[kind] = value
            ctx.save()
        return value

    def _done(self, ctx: StepContext, operation: Any, timeout: float = SETTLE_TIMEOUT) -> None:
        wait_operation(
            self.account, self.project, operation, heartbeat=ctx.heartbeat, timeout=timeout
        )

    def _make(self, ctx: StepContext, insert: Callable[[], Any]) -> bool:
        """Insert and wait; False when the resource existed already."""
        operation = exists_already(insert)
        if operation is None:
            return False
        self._done(ctx, operation)
        return True

    def _ensure(self, ctx: StepContext, insert: Callable[[], Any], made: str) -> None:
        """Make a resource and log `made`, unless it exists already (an earlier attempt made
        it: names are the job's, so the insert answers 409)."""
        if self._make(ctx, insert):
            ctx.log(made)

    def _delete(self, ctx: StepContext, delete: Callable[[], Any]) -> bool:
        """Delete and wait; False when there was nothing to delete."""
        operation = not_found(delete)
        if operation is None:
            return False
        self._done(ctx, operation)
        return True

    def _instance(self, zone: str, name: str) -> compute_v1.Instance | None:
        instances = self.client(compute_v1.InstancesClient)
        found: compute_v1.Instance | None = not_found(
            partial(instances.get, project=self.project, zone=zone, instance=name)
        )
        return found

    def _link(self, path: str) -> str:
        return f"projects/{self.project}/{path}"

    def _zones(self) -> list[str]:
        region = not_found(
            lambda: self.client(compute_v1.RegionsClient).get(
                project=self.project, region=self.region
            )
        )
        if region is None:
            raise CloudError(f"The region {self.region} does not exist in GCP.")
        zones = sorted(short(zone) for zone in region.zones)
        if not zones:
            raise CloudError(f"The region {self.region} has no zones.")
        return zones

    def _zone_list(self, config: InfraConfig) -> list[str]:
        """The region's zones, as stepValidate recorded them. None: it never got that far, so
        nothing zonal was made (and a teardown has nothing zonal to delete)."""
        return [z for z in config.resources.get("zones", "").split(",") if z]

    def _vm_firewall(
        self,
        config: InfraConfig,
        ctx: StepContext,
        suffix: str,
        *,
        priority: int,
        sources: list[str],
        description: str,
        allowed: list[compute_v1.Allowed] | None = None,
        denied: list[compute_v1.Denied] | None = None,
    ) -> tuple[str, bool]:
        """A rule for ingress to the job's VMs (by their network tag): its name, and whether it
        was made now (False: an earlier attempt made it)."""
        name = ctx.resource_name(suffix)
        rule = compute_v1.Firewall(
            name=name, network=config.resources["vpc"], direction="INGRESS", priority=priority,
            source_ranges=sources, target_tags=[self._network_tag(ctx)], allowed=allowed or [],
            denied=denied or [], description=description,
        )  # fmt: skip
        firewalls = self.client(compute_v1.FirewallsClient)
        made = self._make(
            ctx, lambda: firewalls.insert_unary(project=self.project, firewall_resource=rule)
        )
        if made:
            ctx.log(f"created firewall rule {name}: {description}")
        return name, made

    def _network_tag(self, ctx: StepContext) -> str:
        return f"zopday-{ctx.token}"
