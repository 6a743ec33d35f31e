"""AWS through boto3 (`aws_sdk`): VPC + NAT, IAM for SSM, a launch template, instances or an ASG,
and the load balancer of `aws_lb`.

Every method is idempotent: a step cut short half-way (an error, a worker killed) runs again as
a later attempt, finds what it made by its tags (`aws_base`) and resumes where it stopped.
"""

import base64
import ipaddress
import json
import time
from functools import partial
from typing import Any

from botocore.exceptions import ClientError

from provisioning.choices import NetworkMode, PoolMode, VmState
from provisioning.infra import InfraConfig, VmRecord
from provisioning.providers.aws_base import SETTLE_TIMEOUT
from provisioning.providers.aws_lb import AwsLoadBalancer
from provisioning.providers.aws_sandbox import sandbox_epoch
from provisioning.providers.aws_sdk import (
    NOT_AWS,
    available_zones,
    client_for,
    error_code,
    get_or_none,
    mapped,
    tag_list,
)
from provisioning.providers.base import CloudError, StepContext, wait_for_sentinels

SSM_POLICY_ARN = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
DEFAULT_AMI_PARAMETER = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
ASSUME_EC2 = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "ec2.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
)
LIVE_INSTANCE_STATES = ["pending", "running", "stopping", "stopped"]


class AwsProvider(AwsLoadBalancer):
    """VM environments on AWS: VPC + NAT, IAM for SSM, a launch template, instances or an ASG,
    and an optional ALB with a target group, a listener and a Route 53 record."""

    @mapped
    def check_connection(self) -> str:
        try:  # botocore's parsers fail with these on XML of another shape
            sts = client_for(self.account, "sts", self.region, quick=True)
            identity = sts.get_caller_identity()
            ec2 = client_for(self.account, "ec2", self.region, quick=True)
            zones = ec2.describe_availability_zones()["AvailabilityZones"]
            return (
                f"Connected as {identity['Arn']} (account {identity['Account']}); "
                f"{len(zones)} availability zones in {self.region}."
            )
        except (KeyError, TypeError, AttributeError) as error:
            raise CloudError(NOT_AWS, code="NotAws") from error

    @mapped
    def validate(self, config: InfraConfig, ctx: StepContext) -> str:
        ec2 = self.client("ec2")
        self.client("sts").get_caller_identity()
        zones = available_zones(self.account, self.region, cached=False)
        ctx.log(f"credentials valid; zones: {', '.join(zones)}")
        if self.account.sandbox:  # tells a restarted sandbox from VMs deleted in it
            epoch = sandbox_epoch(self.account, self.region, create=True)
            self._record(config, ctx, "sandbox_epoch", epoch)
        if config.network_mode == NetworkMode.EXISTING:
            try:
                subnet = ec2.describe_subnets(SubnetIds=[config.existing_subnet_id])["Subnets"][0]
            except ClientError as error:
                raise CloudError(
                    f"The subnet {config.existing_subnet_id} does not exist in {self.region}: "
                    f"{error.response['Error'].get('Message', '')}"
                ) from error
            if subnet["VpcId"] != config.existing_vpc_id:
                raise CloudError(
                    f"The subnet {config.existing_subnet_id} is in {subnet['VpcId']}, "
                    f"not in {config.existing_vpc_id}."
                )
            ctx.log(f"existing VPC {config.existing_vpc_id}, subnet {config.existing_subnet_id}")
        if config.image_id:
            try:
                found = ec2.describe_images(ImageIds=[config.image_id])["Images"]
            except ClientError as error:
                if not error.response["Error"].get("Code", "").startswith("InvalidAMIID"):
                    raise
                found = []
            if not found:
                raise CloudError(
                    f"The image {config.image_id} does not exist in {self.region}, or this "
                    "account may not use it: give another image id, or none for the default."
                )
            ctx.log(f"image {config.image_id}: {found[0].get('Name', '')}")
        else:
            parameter = self.client("ssm").get_parameter(Name=DEFAULT_AMI_PARAMETER)
            config.image_id = parameter["Parameter"]["Value"]
            ctx.save()
            ctx.log(f"image {config.image_id} from {DEFAULT_AMI_PARAMETER}")
        return f"Credentials, region {self.region} and image {config.image_id} checked."

    # ---- network ----------------------------------------------------------------------------
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
        vpc = self._existing(
            ctx,
            lambda: self._find_one(ec2.describe_vpcs, "Vpcs", Filters=self._filters(ctx, "vpc")),
        )
        if vpc is None:
            vpc = ec2.create_vpc(
                CidrBlock=config.vpc_cidr, TagSpecifications=self._spec(ctx, "vpc", "vpc")
            )["Vpc"]
            ctx.log(f"created VPC {vpc['VpcId']} ({config.vpc_cidr})")
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
            subnet = self._existing(
                ctx,
                partial(
                    self._find_one,
                    ec2.describe_subnets,
                    "Subnets",
                    Filters=self._filters(ctx, role),
                ),
            )
            if subnet is None:
                subnet = ec2.create_subnet(
                    VpcId=vpc_id,
                    CidrBlock=str(block),
                    AvailabilityZone=zone,
                    TagSpecifications=self._spec(ctx, "subnet", role),
                )["Subnet"]
                ctx.log(f"created {role.replace('_', ' ')} {subnet['SubnetId']} ({block}, {zone})")
            self._record(config, ctx, role, subnet["SubnetId"])

        igw = self._existing(
            ctx,
            lambda: self._find_one(
                ec2.describe_internet_gateways,
                "InternetGateways",
                Filters=self._filters(ctx, "igw"),
            ),
        )
        if igw is None:
            igw = ec2.create_internet_gateway(
                TagSpecifications=self._spec(ctx, "internet-gateway", "igw")
            )["InternetGateway"]
            ctx.log(f"created internet gateway {igw['InternetGatewayId']}")
        igw_id = self._record(config, ctx, "igw", igw["InternetGatewayId"])
        if not any(a.get("VpcId") == vpc_id for a in igw.get("Attachments", [])):
            ec2.attach_internet_gateway(InternetGatewayId=igw_id, VpcId=vpc_id)

        address = self._existing(
            ctx,
            lambda: self._find_one(
                ec2.describe_addresses, "Addresses", Filters=self._filters(ctx, "nat-eip")
            ),
        )
        if address is None:
            address = ec2.allocate_address(
                Domain="vpc", TagSpecifications=self._spec(ctx, "elastic-ip", "nat-eip")
            )
            ctx.log(f"allocated Elastic IP {address['AllocationId']} for the NAT gateway")
        allocation_id = self._record(config, ctx, "nat_eip", address["AllocationId"])

        nat = self._existing(
            ctx,
            lambda: self._find_one(
                ec2.describe_nat_gateways,
                "NatGateways",
                Filter=[
                    *self._filters(ctx, "nat"),
                    {"Name": "state", "Values": ["pending", "available"]},
                ],
            ),
        )
        if nat is None:
            nat = ec2.create_nat_gateway(
                SubnetId=config.resources["public_subnet"],
                AllocationId=allocation_id,
                ClientToken=f"{ctx.token}-nat",
                TagSpecifications=self._spec(ctx, "natgateway", "nat"),
            )["NatGateway"]
            ctx.log(f"created NAT gateway {nat['NatGatewayId']}")
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
            table = self._existing(
                ctx,
                partial(
                    self._find_one,
                    ec2.describe_route_tables,
                    "RouteTables",
                    Filters=self._filters(ctx, role),
                ),
            )
            if table is None:
                table = ec2.create_route_table(
                    VpcId=vpc_id, TagSpecifications=self._spec(ctx, "route-table", role)
                )["RouteTable"]
                ctx.log(f"created route table {table['RouteTableId']} ({role.replace('_', ' ')})")
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

    # ---- IAM --------------------------------------------------------------------------------
    @mapped
    def create_iam(self, config: InfraConfig, ctx: StepContext) -> str:
        """A role EC2 can assume with AmazonSSMManagedInstanceCore (the exec channel), and its
        instance profile."""
        iam = self.client("iam")
        name = ctx.resource_name("vm")
        role = self._existing(ctx, lambda: get_or_none(iam.get_role, "Role", RoleName=name))
        if role is None:
            iam.create_role(
                RoleName=name,
                AssumeRolePolicyDocument=ASSUME_EC2,
                Description=f"ZopDay VMs of {ctx.name}: SSM exec only",
                Tags=tag_list(self._tags(ctx, "role")),
            )
            ctx.log(f"created IAM role {name}")
        self._record(config, ctx, "iam_role", name)
        attached = (
            self._existing(
                ctx, lambda: iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]
            )
            or []
        )
        if not any(p["PolicyArn"] == SSM_POLICY_ARN for p in attached):
            iam.attach_role_policy(RoleName=name, PolicyArn=SSM_POLICY_ARN)
            ctx.log("attached AmazonSSMManagedInstanceCore")
        profile = self._existing(
            ctx,
            lambda: get_or_none(
                iam.get_instance_profile, "InstanceProfile", InstanceProfileName=name
            ),
        )
        if profile is None:
            profile = iam.create_instance_profile(
                InstanceProfileName=name, Tags=tag_list(self._tags(ctx, "instance-profile"))
            )["InstanceProfile"]
            ctx.log(f"created instance profile {name}")
        self._record(config, ctx, "instance_profile", name)
        if not any(role["RoleName"] == name for role in profile.get("Roles", [])):
            iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
        return f"IAM role and instance profile {name} with the SSM managed policy."

    # ---- launch template --------------------------------------------------------------------
    @mapped
    def create_launch_template(self, config: InfraConfig, ctx: StepContext, user_data: str) -> str:
        """The VMs' security group (no ingress at all: no port 22), then a launch template with
        the user data, the instance profile, no key pair and no public IP."""
        ec2 = self.client("ec2")
        group_id = self._ensure_security_group(
            config, ctx, "vm-sg", "vm", "ZopDay VMs: no inbound except from the job's load balancer"
        )
        self._record(config, ctx, "security_group", group_id)

        template = self._existing(
            ctx,
            lambda: self._find_one(
                ec2.describe_launch_templates,
                "LaunchTemplates",
                Filters=self._filters(ctx, "launch-template"),
            ),
        )
        if template is None:
            interface: dict[str, Any] = {
                "DeviceIndex": 0,
                "AssociatePublicIpAddress": False,
                "Groups": [group_id],
                "DeleteOnTermination": True,
            }
            if config.pool_mode == PoolMode.FIXED:
                interface["SubnetId"] = config.resources["private_subnet"]
            data = {
                "ImageId": config.image_id,
                "InstanceType": config.instance_type,
                "IamInstanceProfile": {"Name": config.resources["instance_profile"]},
                "UserData": base64.b64encode(user_data.encode()).decode(),
                "NetworkInterfaces": [interface],
                "BlockDeviceMappings": [
                    {
                        "DeviceName": "/dev/xvda",
                        "Ebs": {
                            "VolumeSize": config.disk_gb,
                            "VolumeType": "gp3",
                            "Encrypted": True,
                            "DeleteOnTermination": True,
                        },
                    }
                ],
                "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
                "TagSpecifications": [
                    {"ResourceType": "instance", "Tags": tag_list(self._tags(ctx, "vm"))},
                    {"ResourceType": "volume", "Tags": tag_list(self._tags(ctx, "volume"))},
                ],
            }
            template = ec2.create_launch_template(
                LaunchTemplateName=ctx.resource_name("lt"),
                LaunchTemplateData=data,
                ClientToken=f"{ctx.token}-lt",
                TagSpecifications=self._spec(ctx, "launch-template", "launch-template"),
            )["LaunchTemplate"]
            ctx.log(f"created launch template {template['LaunchTemplateId']}")
        template_id = self._record(config, ctx, "launch_template", template["LaunchTemplateId"])
        return f"Launch template {template_id} with security group {group_id}."

    # ---- VMs --------------------------------------------------------------------------------
    def _live_instances(self, ctx: StepContext) -> list[dict[str, Any]]:
        ec2 = self.client("ec2")
        filters = [
            *self._filters(ctx, "vm"),
            {"Name": "instance-state-name", "Values": LIVE_INSTANCE_STATES},
        ]
        instances = []
        for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page["Reservations"]:
                instances.extend(reservation["Instances"])
        return sorted(instances, key=lambda i: (str(i.get("LaunchTime", "")), i["InstanceId"]))

    def _remember_vms(self, config: InfraConfig, instances: list[dict[str, Any]]) -> None:
        known = {vm.instance_id: vm for vm in config.vms}
        config.vms = [
            known.get(i["InstanceId"])
            or VmRecord(
                instance_id=i["InstanceId"],
                state=VmState.LAUNCHING,
                private_ip=i.get("PrivateIpAddress", ""),
                zone=i.get("Placement", {}).get("AvailabilityZone", ""),
            )
            for i in instances
        ]

    @mapped
    def create_vms(self, config: InfraConfig, ctx: StepContext) -> str:
        """Fixed: run the missing instances from the template. ASG: an auto scaling group on the
        private subnet; its instances carry the job's tags."""
        template = {"LaunchTemplateId": config.resources["launch_template"], "Version": "$Latest"}
        if config.pool_mode == PoolMode.FIXED:
            existing = self._existing(ctx, lambda: self._live_instances(ctx)) or []
            missing = config.instance_count - len(existing)
            if missing > 0:
                launched = self.client("ec2").run_instances(
                    LaunchTemplate=template,
                    MinCount=missing,
                    MaxCount=missing,
                    ClientToken=f"{ctx.token}-vms-{len(existing)}",
                    # The same interface as the template's, stated again: some EC2
                    # implementations (moto) misread the template's boolean.
                    NetworkInterfaces=[
                        {
                            "DeviceIndex": 0,
                            "AssociatePublicIpAddress": False,
                            "SubnetId": config.resources["private_subnet"],
                            "Groups": [config.resources["security_group"]],
                            "DeleteOnTermination": True,
                        }
                    ],
                    TagSpecifications=self._spec(ctx, "instance", "vm"),
                )["Instances"]
                ctx.log(f"launched {', '.join(i['InstanceId'] for i in launched)}")
                existing += launched
            instances = existing
        else:
            autoscaling = self.client("autoscaling")
            group_name = ctx.resource_name("asg")
            groups = self._existing(
                ctx,
                lambda: autoscaling.describe_auto_scaling_groups(
                    AutoScalingGroupNames=[group_name]
                )["AutoScalingGroups"],
            )
            if not groups:
                autoscaling.create_auto_scaling_group(
                    AutoScalingGroupName=group_name,
                    LaunchTemplate=template,
                    MinSize=config.asg_min,
                    MaxSize=config.asg_max,
                    DesiredCapacity=config.asg_desired,
                    VPCZoneIdentifier=config.resources["private_subnet"],
                    Tags=[
                        {"Key": k, "Value": v, "PropagateAtLaunch": True}
                        for k, v in self._tags(ctx, "vm").items()
                    ],
                )
                ctx.log(
                    f"created auto scaling group {group_name} "
                    f"(min {config.asg_min}, max {config.asg_max}, desired {config.asg_desired})"
                )
            self._record(config, ctx, "asg", group_name)
            instances = []

            def group_full() -> bool:
                nonlocal instances
                instances = self._live_instances(ctx)
                return len(instances) >= config.asg_desired

            ctx.wait(f"{group_name} to launch its instances", group_full, SETTLE_TIMEOUT)
        self._remember_vms(config, instances)
        ctx.save()
        return f"{len(instances)} VM(s): {', '.join(i['InstanceId'] for i in instances)}."

    @mapped
    def wait_until_ready(self, config: InfraConfig, ctx: StepContext) -> str:
        """Ask every VM through SSM whether the bootstrap sentinel exists, until all say yes or
        the timeout passes. A VM not yet registered with SSM counts as still bootstrapping."""
        ssm, ec2 = self.client("ssm"), self.client("ec2")
        command = f"test -f {config.sentinel_path}"

        def running(pending: list[VmRecord]) -> set[str]:
            ids = [vm.instance_id for vm in pending]
            described = ec2.describe_instances(InstanceIds=ids)["Reservations"]
            return {
                i["InstanceId"]
                for r in described
                for i in r["Instances"]
                if i["State"]["Name"] == "running"
            }

        wait_for_sentinels(
            config, ctx, running=running,
            present=lambda vm: self._sentinel_present(ssm, vm.instance_id, command),
            shell="open the VM through the SSM exec channel",
        )  # fmt: skip
        return f"{len(config.vms)} VM(s) ready (sentinel found through SSM)."

    def _sentinel_present(self, ssm: Any, instance_id: str, command: str) -> bool:
        try:
            sent = ssm.send_command(
                InstanceIds=[instance_id],
                DocumentName="AWS-RunShellScript",
                Parameters={"commands": [command]},
                TimeoutSeconds=30,
            )
        except ClientError as error:
            if error_code(error) in {"InvalidInstanceId", "InvalidInstanceInformationFilterValue"}:
                return False  # the SSM agent has not registered yet
            raise
        command_id = sent["Command"]["CommandId"]
        for _ in range(30):
            try:
                result = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
            except ClientError as error:
                if error_code(error) == "InvocationDoesNotExist":
                    time.sleep(0.5)
                    continue
                raise
            status = result["Status"]
            if status in {"Pending", "InProgress", "Delayed"}:
                time.sleep(0.5)
                continue
            return bool(status == "Success")
        return False

    # ---- teardown ---------------------------------------------------------------------------
    @mapped
    def delete_vms(self, config: InfraConfig, ctx: StepContext) -> str:
        """Fixed: terminate. ASG: min = max = desired = 0, then delete the group."""
        group_name = ctx.resource_name("asg")
        autoscaling = self.client("autoscaling")
        groups = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group_name])
        if groups["AutoScalingGroups"]:
            autoscaling.update_auto_scaling_group(
                AutoScalingGroupName=group_name, MinSize=0, MaxSize=0, DesiredCapacity=0
            )
            ctx.log(f"{group_name}: min = max = desired = 0")
            autoscaling.delete_auto_scaling_group(AutoScalingGroupName=group_name, ForceDelete=True)
            ctx.wait(
                f"{group_name} to be deleted",
                lambda: (
                    not autoscaling.describe_auto_scaling_groups(
                        AutoScalingGroupNames=[group_name]
                    )["AutoScalingGroups"]
                ),
                SETTLE_TIMEOUT,
            )
            ctx.log(f"deleted auto scaling group {group_name}")
        ids = [i["InstanceId"] for i in self._live_instances(ctx)]
        if ids:
            self.client("ec2").terminate_instances(InstanceIds=ids)
            ctx.log(f"terminating {', '.join(ids)}")
            ctx.wait("the VMs to terminate", lambda: not self._live_instances(ctx), SETTLE_TIMEOUT)
        for vm in config.vms:
            vm.state = VmState.TERMINATED
        config.resources.pop("asg", None)
        ctx.save()
        return f"Terminated {len(ids)} VM(s)." if ids else "No VMs were running."

    @mapped
    def delete_launch_template(self, config: InfraConfig, ctx: StepContext) -> str:
        ec2 = self.client("ec2")
        templates = ec2.describe_launch_templates(Filters=self._filters(ctx, "launch-template"))[
            "LaunchTemplates"
        ]
        for template in templates:
            ec2.delete_launch_template(LaunchTemplateId=template["LaunchTemplateId"])
        config.resources.pop("launch_template", None)
        ctx.save()
        return "Deleted the launch template." if templates else "No launch template to delete."

    @mapped
    def delete_security_group(self, config: InfraConfig, ctx: StepContext) -> str:
        ec2 = self.client("ec2")
        groups = ec2.describe_security_groups(Filters=self._filters(ctx))["SecurityGroups"]
        for group in groups:
            ec2.delete_security_group(GroupId=group["GroupId"])
        config.resources.pop("security_group", None)
        ctx.save()
        return f"Deleted {len(groups)} security group(s)."

    @mapped
    def delete_iam(self, config: InfraConfig, ctx: StepContext) -> str:
        iam = self.client("iam")
        name = ctx.resource_name("vm")
        done = []
        try:
            profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
            for role in profile.get("Roles", []):
                iam.remove_role_from_instance_profile(
                    InstanceProfileName=name, RoleName=role["RoleName"]
                )
            iam.delete_instance_profile(InstanceProfileName=name)
            done.append("instance profile")
        except ClientError as error:
            if error_code(error) != "NoSuchEntity":
                raise
        try:
            for policy in iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]:
                iam.detach_role_policy(RoleName=name, PolicyArn=policy["PolicyArn"])
            iam.delete_role(RoleName=name)
            done.append("role")
        except ClientError as error:
            if error_code(error) != "NoSuchEntity":
                raise
        config.resources.pop("iam_role", None)
        config.resources.pop("instance_profile", None)
        ctx.save()
        return f"Deleted the IAM {' and '.join(done)} {name}." if done else "No IAM role left."

    @mapped
    def delete_network(self, config: InfraConfig, ctx: StepContext) -> str:
        """Only what carries the job's tags: an existing VPC never does, so it stays."""
        ec2 = self.client("ec2")
        filters = self._filters(ctx)
        nats = ec2.describe_nat_gateways(
            Filter=[*filters, {"Name": "state", "Values": ["pending", "available", "deleting"]}]
        )["NatGateways"]
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
        for address in ec2.describe_addresses(Filters=filters)["Addresses"]:
            ec2.release_address(AllocationId=address["AllocationId"])
        for table in ec2.describe_route_tables(Filters=filters)["RouteTables"]:
            for association in table.get("Associations", []):
                if not association.get("Main"):
                    ec2.disassociate_route_table(
                        AssociationId=association["RouteTableAssociationId"]
                    )
            ec2.delete_route_table(RouteTableId=table["RouteTableId"])
        for gateway in ec2.describe_internet_gateways(Filters=filters)["InternetGateways"]:
            for attachment in gateway.get("Attachments", []):
                ec2.detach_internet_gateway(
                    InternetGatewayId=gateway["InternetGatewayId"], VpcId=attachment["VpcId"]
                )
            ec2.delete_internet_gateway(InternetGatewayId=gateway["InternetGatewayId"])
        for subnet in ec2.describe_subnets(Filters=filters)["Subnets"]:
            ec2.delete_subnet(SubnetId=subnet["SubnetId"])
        vpcs = ec2.describe_vpcs(Filters=filters)["Vpcs"]
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

    @mapped
    def describe_vms(self, config: InfraConfig, ctx: StepContext) -> list[dict[str, str]]:
        """The job's VMs as EC2 reports them now (id, state, private address, zone)."""
        ids = [vm.instance_id for vm in config.vms]
        if not ids:
            return []
        reservations = self.client("ec2").describe_instances(InstanceIds=ids)["Reservations"]
        return [
            {
                "instance_id": i["InstanceId"],
                "state": i["State"]["Name"],
                "private_ip": i.get("PrivateIpAddress", ""),
                "zone": i.get("Placement", {}).get("AvailabilityZone", ""),
                "instance_type": i.get("InstanceType", ""),
                "public_ip": i.get("PublicIpAddress", ""),
            }
            for r in reservations
            for i in r["Instances"]
        ]
