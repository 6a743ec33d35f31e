"""AWS stepCreateNetwork and stepDeleteNetwork: a VPC with a private subnet, two public subnets,
an internet gateway, a NAT gateway and the route tables; each found by its tags before made."""

import ipaddress
from functools import partial
from typing import Any

from provisioning.choices import NetworkMode
from provisioning.clouds.aws.base import SETTLE_TIMEOUT, AwsBase
from provisioning.clouds.aws.sdk import available_zones, mapped
from provisioning.clouds.context import StepContext
from provisioning.infra import InfraConfig


class AwsNetwork(AwsBase):
    @mapped
    def create_network(self, config: InfraConfig, ctx: StepContext) -> str:
        """1. VPC 2. private subnet + two public subnets 3. IGW 4. EIP + NAT gateway 5. routes."""
        if config.network_mode == NetworkMode.EXISTING:
            config.resources["vpc"] = config.existing_vpc_id
            config.resources["private_subnet"] = config.existing_subnet_id
            config.created_network = False
            ctx.save()
            return f"Using the existing VPC {config.existing_vpc_id}; it is left untouched."
        ec2 = self.client("ec2")
        config.created_network = True
        vpc = self._find_or_create(
            ctx,
            self._tagged(ec2.describe_vpcs, "Vpcs", ctx, "vpc"),
            lambda: ec2.create_vpc(
                CidrBlock=config.vpc_cidr, TagSpecifications=self._spec(ctx, "vpc", "vpc")
            )["Vpc"],
            lambda vpc: f"created VPC {vpc['VpcId']} ({config.vpc_cidr})",
        )
        vpc_id = self._record(config, ctx, "vpc", vpc["VpcId"])
        # Also when the VPC was found: an attempt cut short may have created it and stopped here.
        ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": True})

        zones = available_zones(self.account, self.region, cached=True)
        blocks = list(ipaddress.ip_network(config.vpc_cidr).subnets(new_prefix=24))
        plan = [
            ("private_subnet", blocks[0], zones[0]),
            ("public_subnet", blocks[1], zones[0]),
            ("public_subnet_b", blocks[2], zones[1 % len(zones)]),
        ]
        for role, block, zone in plan:
            subnet = self._subnet(ec2, ctx, vpc_id, role, str(block), zone)
            self._record(config, ctx, role, subnet["SubnetId"])

        igw = self._find_or_create(
            ctx,
            self._tagged(ec2.describe_internet_gateways, "InternetGateways", ctx, "igw"),
            lambda: ec2.create_internet_gateway(
                TagSpecifications=self._spec(ctx, "internet-gateway", "igw")
            )["InternetGateway"],
            lambda igw: f"created internet gateway {igw['InternetGatewayId']}",
        )
        igw_id = self._record(config, ctx, "igw", igw["InternetGatewayId"])
        if not any(a.get("VpcId") == vpc_id for a in igw.get("Attachments", [])):
            ec2.attach_internet_gateway(InternetGatewayId=igw_id, VpcId=vpc_id)

        address = self._find_or_create(
            ctx,
            self._tagged(ec2.describe_addresses, "Addresses", ctx, "nat-eip"),
            lambda: ec2.allocate_address(
                Domain="vpc", TagSpecifications=self._spec(ctx, "elastic-ip", "nat-eip")
            ),
            lambda address: f"allocated Elastic IP {address['AllocationId']} for the NAT gateway",
        )
        allocation_id = self._record(config, ctx, "nat_eip", address["AllocationId"])

        nat = self._find_or_create(
            ctx,
            partial(
                self._find_one,
                ec2.describe_nat_gateways,
                "NatGateways",
                ctx,
                "nat",
                argument="Filter",
                extra=[{"Name": "state", "Values": ["pending", "available"]}],
            ),
            lambda: ec2.create_nat_gateway(
                SubnetId=config.resources["public_subnet"],
                AllocationId=allocation_id,
                ClientToken=f"{ctx.token}-nat",
                TagSpecifications=self._spec(ctx, "natgateway", "nat"),
            )["NatGateway"],
            lambda nat: f"created NAT gateway {nat['NatGatewayId']}",
        )
        nat_id = self._record(config, ctx, "nat_gateway", nat["NatGatewayId"])
        if nat.get("State") != "available":
            ctx.wait(
                f"the NAT gateway {nat_id} to become available",
                lambda: (
                    ec2.describe_nat_gateways(NatGatewayIds=[nat_id])["NatGateways"][0]["State"]
                    == "available"
                ),
                SETTLE_TIMEOUT,
            )

        routes = [
            ("public_routes", {"GatewayId": igw_id}, ["public_subnet", "public_subnet_b"]),
            ("private_routes", {"NatGatewayId": nat_id}, ["private_subnet"]),
        ]
        for role, target, subnets in routes:
            table = self._route_table(ec2, ctx, vpc_id, role)
            table_id = self._record(config, ctx, role, table["RouteTableId"])
            if not any(r.get("DestinationCidrBlock") == "0.0.0.0/0" for r in table["Routes"]):
                ec2.create_route(RouteTableId=table_id, DestinationCidrBlock="0.0.0.0/0", **target)
            associated = {a.get("SubnetId") for a in table.get("Associations", [])}
            for subnet_role in subnets:
                if config.resources[subnet_role] not in associated:
                    ec2.associate_route_table(
                        RouteTableId=table_id, SubnetId=config.resources[subnet_role]
                    )
        return (
            f"VPC {vpc_id} with a private subnet {config.resources['private_subnet']} and NAT "
            f"egress through {nat_id}."
        )

    def _subnet(
        self, ec2: Any, ctx: StepContext, vpc_id: str, role: str, block: str, zone: str
    ) -> Any:
        return self._find_or_create(
            ctx,
            self._tagged(ec2.describe_subnets, "Subnets", ctx, role),
            lambda: ec2.create_subnet(
                VpcId=vpc_id, CidrBlock=block, AvailabilityZone=zone,
                TagSpecifications=self._spec(ctx, "subnet", role),
            )["Subnet"],
            lambda subnet: (
                f"created {role.replace('_', ' ')} {subnet['SubnetId']} ({block}, {zone})"
            ),
        )  # fmt: skip

    def _route_table(self, ec2: Any, ctx: StepContext, vpc_id: str, role: str) -> Any:
        return self._find_or_create(
            ctx,
            self._tagged(ec2.describe_route_tables, "RouteTables", ctx, role),
            lambda: ec2.create_route_table(
                VpcId=vpc_id, TagSpecifications=self._spec(ctx, "route-table", role)
            )["RouteTable"],
            lambda table: f"created route table {table['RouteTableId']} ({role.replace('_', ' ')})",
        )

    @mapped
    def delete_network(self, config: InfraConfig, ctx: StepContext) -> str:
        """Only what carries the job's tags: an existing VPC never does, so it stays."""
        ec2 = self.client("ec2")
        nats = self._owned(
            ec2.describe_nat_gateways, "NatGateways", ctx, argument="Filter",
            extra=[{"Name": "state", "Values": ["pending", "available", "deleting"]}],
        )  # fmt: skip
        for nat in nats:
            if nat["State"] != "deleting":
                ec2.delete_nat_gateway(NatGatewayId=nat["NatGatewayId"])
        if nats:
            ids = [nat["NatGatewayId"] for nat in nats]
            ctx.wait(
                "the NAT gateway to be deleted",
                lambda: all(
                    n["State"] == "deleted"
                    for n in ec2.describe_nat_gateways(NatGatewayIds=ids)["NatGateways"]
                ),
                SETTLE_TIMEOUT,
            )
        for address in self._owned(ec2.describe_addresses, "Addresses", ctx):
            ec2.release_address(AllocationId=address["AllocationId"])
        for table in self._owned(ec2.describe_route_tables, "RouteTables", ctx):
            for association in table.get("Associations", []):
                if not association.get("Main"):
                    ec2.disassociate_route_table(
                        AssociationId=association["RouteTableAssociationId"]
                    )
            ec2.delete_route_table(RouteTableId=table["RouteTableId"])
        for gateway in self._owned(ec2.describe_internet_gateways, "InternetGateways", ctx):
            for attachment in gateway.get("Attachments", []):
                ec2.detach_internet_gateway(
                    InternetGatewayId=gateway["InternetGatewayId"], VpcId=attachment["VpcId"]
                )
            ec2.delete_internet_gateway(InternetGatewayId=gateway["InternetGatewayId"])
        for subnet in self._owned(ec2.describe_subnets, "Subnets", ctx):
            ec2.delete_subnet(SubnetId=subnet["SubnetId"])
        vpcs = self._owned(ec2.describe_vpcs, "Vpcs", ctx)
        for vpc in vpcs:
            ec2.delete_vpc(VpcId=vpc["VpcId"])
        for kind in (
            "vpc", "private_subnet", "public_subnet", "public_subnet_b", "igw", "nat_eip",
            "nat_gateway", "public_routes", "private_routes",
        ):  # fmt: skip
            config.resources.pop(kind, None)
        ctx.save()
        if not config.created_network:
            return "The existing VPC was left untouched."
        return (
            f"Deleted the VPC {vpcs[0]['VpcId']} and its network." if vpcs else "No network left."
        )
