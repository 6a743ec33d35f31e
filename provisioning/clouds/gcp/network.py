"""GCP stepCreateNetwork and stepDeleteNetwork: a VPC network with a private subnetwork and a
Cloud Router with Cloud NAT, named deterministically (a 409 means an earlier attempt made it)."""

import ipaddress
from functools import partial

from google.cloud import compute_v1

from provisioning.choices import NetworkMode
from provisioning.clouds.context import StepContext
from provisioning.clouds.gcp.base import GcpBase
from provisioning.clouds.gcp.sdk import mapped
from provisioning.infra import InfraConfig


class GcpNetwork(GcpBase):
    # ---- network ----------------------------------------------------------------------------
    @mapped
    def create_network(self, config: InfraConfig, ctx: StepContext) -> str:
        """1. a custom-mode VPC network 2. the private subnetwork (Private Google Access on)
        3. a Cloud Router with Cloud NAT: egress only, the VMs have no public address."""
        if config.network_mode == NetworkMode.EXISTING:
            config.resources["vpc"] = self._link(f"global/networks/{config.existing_vpc_id}")
            config.resources["private_subnet"] = self._link(
                f"regions/{self.region}/subnetworks/{config.existing_subnet_id}"
            )
            config.created_network = False
            ctx.save()
            return f"Using the existing network {config.existing_vpc_id}; it is left untouched."
        config.created_network = True
        networks = self.client(compute_v1.NetworksClient)
        name = ctx.resource_name("net")
        self._ensure(
            ctx,
            lambda: networks.insert_unary(
                project=self.project,
                network_resource=compute_v1.Network(
                    name=name,
                    auto_create_subnetworks=False,
                    description=f"ZopDay {ctx.name}",
                    routing_config=compute_v1.NetworkRoutingConfig(routing_mode="REGIONAL"),
                ),
            ),
            f"created network {name}",
        )
        network = self._record(config, ctx, "vpc", self._link(f"global/networks/{name}"))

        subnetworks = self.client(compute_v1.SubnetworksClient)
        subnet_name = ctx.resource_name("subnet")
        block = str(next(ipaddress.ip_network(config.vpc_cidr).subnets(new_prefix=24)))
        self._ensure(
            ctx,
            lambda: subnetworks.insert_unary(
                project=self.project,
                region=self.region,
                subnetwork_resource=compute_v1.Subnetwork(
                    name=subnet_name,
                    network=network,
                    ip_cidr_range=block,
                    private_ip_google_access=True,
                    description=f"ZopDay {ctx.name}: the VMs",
                ),
            ),
            f"created subnetwork {subnet_name} ({block})",
        )
        self._record(
            config,
            ctx,
            "private_subnet",
            self._link(f"regions/{self.region}/subnetworks/{subnet_name}"),
        )

        routers = self.client(compute_v1.RoutersClient)
        router_name = ctx.resource_name("router")
        nat = compute_v1.RouterNat(
            name=ctx.resource_name("nat"),
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
        )
        self._ensure(
            ctx,
            lambda: routers.insert_unary(
                project=self.project,
                region=self.region,
                router_resource=compute_v1.Router(name=router_name, network=network, nats=[nat]),
            ),
            f"created Cloud Router {router_name} with Cloud NAT",
        )
        self._record(config, ctx, "nat_router", router_name)
        return f"Network {name} with a private subnetwork {block} and Cloud NAT egress."

    @mapped
    def delete_network(self, config: InfraConfig, ctx: StepContext) -> str:
        """Only what the job named: an existing network is never the job's, so it stays."""
        regional = {"project": self.project, "region": self.region}
        done = [
            self._delete(ctx, partial(self.client(client_class).delete_unary, **where))
            for client_class, where in (
                (compute_v1.RoutersClient, {**regional, "router": ctx.resource_name("router")}),
                (compute_v1.SubnetworksClient,
                 {**regional, "subnetwork": ctx.resource_name("subnet")}),
                (compute_v1.NetworksClient,
                 {"project": self.project, "network": ctx.resource_name("net")}),
            )
        ]  # fmt: skip
        for kind in ("vpc", "private_subnet", "nat_router"):
            config.resources.pop(kind, None)
        ctx.save()
        if not config.created_network:
            return "The existing network was left untouched."
        return (
            f"Deleted the network {ctx.resource_name('net')}."
            if any(done)
            else ("No network left.")
        )
