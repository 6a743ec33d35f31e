"""AWS through boto3: the only module that imports the AWS SDK.

Every method is idempotent. Resources are tagged with the job's tags plus `zopday:role` (what
the resource is to the job) and found by those tags, or by their deterministic names, before
anything is created; created ids go into the InfraConfig. The lookups are skipped only on a step's
first attempt (`ctx.first_attempt`): no earlier attempt ran, and the tags carry the job's unique
token, so there is nothing to find. A step cut short half-way (an error, a worker killed) runs
again as a later attempt, finds what it made and resumes where it stopped. SDK exceptions become
CloudError with `retryable` set for throttling, server errors, and resources that are still
settling.
"""

import base64
import ipaddress
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial, wraps
from typing import Any, TypeVar

import boto3
import botocore.session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from provisioning.choices import NetworkMode, PoolMode, VmState
from provisioning.infra import InfraConfig, VmRecord
from provisioning.models import CloudAccount
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
# Error codes after which a later try can succeed: throttling, the service itself, and
# resources that are still being created or deleted.
RETRYABLE_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "TooManyRequestsException",
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
        "DependencyViolation",
        "PriorRequestNotComplete",
        "ResourceInUse",
        "ScalingActivityInProgress",
        "IncorrectInstanceState",
        "InvalidInstanceId",
    }
)
LISTENER_PORT = 80
LIVE_INSTANCE_STATES = ["pending", "running", "stopping", "stopped"]
# How long a teardown waits for a resource to go away (NAT gateways, load balancers, ASGs).
SETTLE_TIMEOUT = 900

# ---- clients --------------------------------------------------------------------------------
# One botocore session for the process (it caches the service models); clients are cached per
# account, region and service, because building one costs tens of milliseconds.
_botocore_session = botocore.session.get_session()
_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()
ROLE_CREDENTIALS_SECONDS = 45 * 60


def client_config() -> Config:
    # The pipeline retries transient errors itself, with its own backoff and a record of every
    # attempt; the SDK's own retries would hide them.
    return Config(
        retries={"max_attempts": 1, "mode": "standard"},
        connect_timeout=10,
        read_timeout=60,
        user_agent_extra="zopday-console",
    )


def _account_key(account: CloudAccount) -> tuple[Any, ...]:
    """What a cached client or answer depends on: a changed account is a new key."""
    return (
        account.pk,
        account.updated_at,
        account.endpoint_url,
        account.access_key_id,
        account.role_arn,
    )


def client_for(account: CloudAccount, service: str, region: str) -> Any:
    """The cached boto3 client of the account for a service in a region (honours the account's
    endpoint URL and role ARN)."""
    key = (*_account_key(account), service, region)
    with _clients_lock:
        entry = _clients.get(key)
        if entry is not None and entry[1] > time.monotonic():
            return entry[0]
        credentials = _credentials(account, region)
        session = boto3.session.Session(botocore_session=_botocore_session)
        client = session.client(
            service,  # type: ignore[call-overload]
            region_name=region,
            endpoint_url=account.endpoint_url or None,
            config=client_config(),
            **credentials,
        )
        lifetime = ROLE_CREDENTIALS_SECONDS if account.role_arn else 10**9
        _clients[key] = (client, time.monotonic() + lifetime)
        return client


# The available zones of an account's region as the last describe saw them. stepValidate asks
# for every job; stepCreateNetwork, right after it, plans its subnets from that answer instead of
# asking again (a miss, e.g. on another worker, asks). Zones of a region change rarely.
_zones: dict[tuple[Any, ...], tuple[list[str], float]] = {}
ZONES_SECONDS = 15 * 60


def forget_clients() -> None:
    with _clients_lock:
        _clients.clear()
        _zones.clear()


def _credentials(account: CloudAccount, region: str) -> dict[str, str]:
    keys = {}
    if account.access_key_id:
        keys = {
            "aws_access_key_id": account.access_key_id,
            "aws_secret_access_key": account.secret_access_key,
        }
    if not account.role_arn:
        return keys
    session = boto3.session.Session(botocore_session=_botocore_session)
    sts = session.client(
        "sts",  # type: ignore[call-overload]
        region_name=region,
        endpoint_url=account.endpoint_url or None,
        config=client_config(),
        **keys,
    )
    with mapped_errors():
        assumed = sts.assume_role(RoleArn=account.role_arn, RoleSessionName="zopday-console")
    creds = assumed["Credentials"]
    return {
        "aws_access_key_id": creds["AccessKeyId"],
        "aws_secret_access_key": creds["SecretAccessKey"],
        "aws_session_token": creds["SessionToken"],
    }


# ---- errors ---------------------------------------------------------------------------------
@contextmanager
def mapped_errors() -> Iterator[None]:
    """Turn what boto3 raises into CloudError carrying the cloud's own message."""
    try:
        yield
    except ClientError as error:
        details = error.response.get("Error", {})
        code = str(details.get("Code", "Error"))
        message = str(details.get("Message", "")) or str(error)
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        retryable = code in RETRYABLE_CODES or status >= 500 or code.endswith(".NotFound")
        operation = error.operation_name
        raise CloudError(
            f"{operation}: {code}: {message}", retryable=retryable, code=code
        ) from error
    except EndpointConnectionError as error:
        raise CloudError(f"Cannot reach AWS: {error}", retryable=True, code="Connection") from error
    except BotoCoreError as error:
        raise CloudError(f"AWS SDK: {error}", retryable=False, code=type(error).__name__) from error


F = TypeVar("F", bound=Callable[..., Any])


def _mapped(method: F) -> F:
    @wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with mapped_errors():
            return method(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _get_or_none(get: Callable[..., Any], key: str, **kwargs: Any) -> Any:
    """An IAM get_* answer's `key`, or None when the entity does not exist."""
    try:
        return get(**kwargs)[key]
    except ClientError as error:
        if _code(error) != "NoSuchEntity":
            raise
        return None


def _tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value} for key, value in tags.items()]


class AwsProvider:
    """VM environments on AWS: VPC + NAT, IAM for SSM, a launch template, instances or an ASG,
    and an optional ALB with a target group, a listener and a Route 53 record."""

    name = "aws"

    def __init__(self, account: CloudAccount, region: str) -> None:
        self.account = account
        self.region = region

    def client(self, service: str) -> Any:
        return client_for(self.account, service, self.region)

    # ---- helpers ----------------------------------------------------------------------------
    def _tags(self, ctx: StepContext, role: str) -> dict[str, str]:
        return {**ctx.tags, "zopday:role": role, "Name": f"{ctx.name}-{role}"}

    def _spec(self, ctx: StepContext, resource_type: str, role: str) -> list[dict[str, Any]]:
        return [{"ResourceType": resource_type, "Tags": _tag_list(self._tags(ctx, role))}]

    def _filters(self, ctx: StepContext, role: str | None = None) -> list[dict[str, Any]]:
        filters = [{"Name": "tag:zopday:token", "Values": [ctx.token]}]
        if role:
            filters.append({"Name": "tag:zopday:role", "Values": [role]})
        return filters

    def _existing(self, ctx: StepContext, find: Callable[[], Any]) -> Any:
        """What an earlier attempt of this step made, or None. On the step's first attempt
        nothing can exist yet, so the lookup (a describe or get call) is not made."""
        if ctx.first_attempt:
            return None
        return find()

    def _record(self, config: InfraConfig, ctx: StepContext, kind: str, value: str) -> str:
        if config.resources.get(kind) != value:
            config.resources[kind] = value
            ctx.save()
        return value

    # ---- connection and validation ----------------------------------------------------------
    @_mapped
    def check_connection(self) -> str:
        identity = self.client("sts").get_caller_identity()
        zones = self.client("ec2").describe_availability_zones()["AvailabilityZones"]
        return (
            f"Connected as {identity['Arn']} (account {identity['Account']}); "
            f"{len(zones)} availability zones in {self.region}."
        )

    @_mapped
    def validate(self, config: InfraConfig, ctx: StepContext) -> str:
        ec2 = self.client("ec2")
        self.client("sts").get_caller_identity()
        zones = self._available_zones(cached=False)
        ctx.log(f"credentials valid; zones: {', '.join(zones)}")
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
        if not config.image_id:
            parameter = self.client("ssm").get_parameter(Name=DEFAULT_AMI_PARAMETER)
            config.image_id = parameter["Parameter"]["Value"]
            ctx.save()
            ctx.log(f"image {config.image_id} from {DEFAULT_AMI_PARAMETER}")
        return f"Credentials, region {self.region} and image {config.image_id} checked."

    def _available_zones(self, *, cached: bool) -> list[str]:
        """The region's available zones: asked for, or (`cached`) as last seen in this process
        within ZONES_SECONDS."""
        key = (*_account_key(self.account), self.region)
        entry = _zones.get(key)
        if cached and entry is not None and entry[1] > time.monotonic():
            return entry[0]
        zones = [
            zone["ZoneName"]
            for zone in self.client("ec2").describe_availability_zones()["AvailabilityZones"]
            if zone.get("State", "available") == "available"
        ]
        if not zones:
            raise CloudError(f"The region {self.region} has no available zones.")
        _zones[key] = (zones, time.monotonic() + ZONES_SECONDS)
        return zones

    # ---- network ----------------------------------------------------------------------------
    def _find_one(self, describe: Callable[..., Any], key: str, **kwargs: Any) -> Any:
        items = describe(**kwargs)[key]
        return items[0] if items else None

    @_mapped
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

        zones = self._available_zones(cached=True)
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
    @_mapped
    def create_iam(self, config: InfraConfig, ctx: StepContext) -> str:
        """A role EC2 can assume with AmazonSSMManagedInstanceCore (the exec channel), and its
        instance profile."""
        iam = self.client("iam")
        name = ctx.resource_name("vm")
        role = self._existing(ctx, lambda: _get_or_none(iam.get_role, "Role", RoleName=name))
        if role is None:
            iam.create_role(
                RoleName=name,
                AssumeRolePolicyDocument=ASSUME_EC2,
                Description=f"ZopDay VMs of {ctx.name}: SSM exec only",
                Tags=_tag_list(self._tags(ctx, "role")),
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
            lambda: _get_or_none(
                iam.get_instance_profile, "InstanceProfile", InstanceProfileName=name
            ),
        )
        if profile is None:
            profile = iam.create_instance_profile(
                InstanceProfileName=name, Tags=_tag_list(self._tags(ctx, "instance-profile"))
            )["InstanceProfile"]
            ctx.log(f"created instance profile {name}")
        self._record(config, ctx, "instance_profile", name)
        if not any(role["RoleName"] == name for role in profile.get("Roles", [])):
            iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
        return f"IAM role and instance profile {name} with the SSM managed policy."

    # ---- launch template --------------------------------------------------------------------
    def _ensure_security_group(
        self, config: InfraConfig, ctx: StepContext, role: str, suffix: str, description: str
    ) -> str:
        """The job's security group of that role: the one an earlier attempt made, or a new one
        in the job's VPC, tagged with the role."""
        group = self._existing(ctx, lambda: self._security_group(ctx, role))
        if group is not None:
            return str(group["GroupId"])
        group_id = str(
            self.client("ec2").create_security_group(
                GroupName=ctx.resource_name(suffix),
                Description=description,
                VpcId=config.resources["vpc"],
                TagSpecifications=self._spec(ctx, "security-group", role),
            )["GroupId"]
        )
        ctx.log(f"created security group {group_id} ({description})")
        return group_id

    def _security_group(self, ctx: StepContext, role: str) -> Any:
        return self._find_one(
            self.client("ec2").describe_security_groups,
            "SecurityGroups",
            Filters=self._filters(ctx, role),
        )

    @_mapped
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
                    {"ResourceType": "instance", "Tags": _tag_list(self._tags(ctx, "vm"))},
                    {"ResourceType": "volume", "Tags": _tag_list(self._tags(ctx, "volume"))},
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

    @_mapped
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

    @_mapped
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
            if _code(error) in {"InvalidInstanceId", "InvalidInstanceInformationFilterValue"}:
                return False  # the SSM agent has not registered yet
            raise
        command_id = sent["Command"]["CommandId"]
        for _ in range(30):
            try:
                result = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
            except ClientError as error:
                if _code(error) == "InvocationDoesNotExist":
                    time.sleep(0.5)
                    continue
                raise
            status = result["Status"]
            if status in {"Pending", "InProgress", "Delayed"}:
                time.sleep(0.5)
                continue
            return bool(status == "Success")
        return False

    # ---- load balancer ----------------------------------------------------------------------
    def _load_balancer(self, ctx: StepContext) -> Any:
        try:
            found = self.client("elbv2").describe_load_balancers(Names=[ctx.resource_name("lb")])
        except ClientError as error:
            if _code(error) == "LoadBalancerNotFound":
                return None
            raise
        return found["LoadBalancers"][0] if found["LoadBalancers"] else None

    def _target_group(self, ctx: StepContext) -> Any:
        try:
            found = self.client("elbv2").describe_target_groups(Names=[ctx.resource_name("tg")])
        except ClientError as error:
            if _code(error) == "TargetGroupNotFound":
                return None
            raise
        return found["TargetGroups"][0] if found["TargetGroups"] else None

    def _lb_subnets(self, config: InfraConfig) -> list[str]:
        if config.created_network:
            return [config.resources["public_subnet"], config.resources["public_subnet_b"]]
        subnets = self.client("ec2").describe_subnets(
            Filters=[{"Name": "vpc-id", "Values": [config.resources["vpc"]]}]
        )["Subnets"]
        one_per_zone: dict[str, str] = {}
        for subnet in sorted(subnets, key=lambda s: s["SubnetId"]):
            one_per_zone.setdefault(subnet["AvailabilityZone"], subnet["SubnetId"])
        return list(one_per_zone.values())[:3]

    @_mapped
    def create_load_balancer(self, config: InfraConfig, ctx: StepContext) -> str:
        """The ALB's security group (HTTP from anywhere), the one inbound rule of the VMs
        (from that group on the service port), and the internet-facing ALB."""
        lb_group_id = self._ensure_security_group(
            config, ctx, "lb-sg", "lb", "ZopDay load balancer: HTTP in"
        )
        self._record(config, ctx, "lb_security_group", lb_group_id)
        self._authorize(
            lb_group_id,
            {
                "IpProtocol": "tcp",
                "FromPort": LISTENER_PORT,
                "ToPort": LISTENER_PORT,
                "IpRanges": [{"CidrIp": "0.0.0.0/0", "Description": "HTTP to the listener"}],
            },
        )
        self._allow_from_lb(config, lb_group_id)
        lb = self._existing(ctx, lambda: self._load_balancer(ctx))
        if lb is None:
            lb = self.client("elbv2").create_load_balancer(
                Name=ctx.resource_name("lb"),
                Subnets=self._lb_subnets(config),
                SecurityGroups=[lb_group_id],
                Scheme="internet-facing",
                Type="application",
                Tags=_tag_list(self._tags(ctx, "lb")),
            )["LoadBalancers"][0]
            ctx.log(f"created load balancer {lb['DNSName']}")
        self._record(config, ctx, "load_balancer", lb["LoadBalancerArn"])
        config.resources["load_balancer_dns"] = lb["DNSName"]
        config.resources["load_balancer_zone"] = lb.get("CanonicalHostedZoneId", "")
        ctx.save()
        return f"Load balancer {lb['DNSName']}."

    def _allow_from_lb(self, config: InfraConfig, lb_group_id: str) -> None:
        """The VMs' inbound rules: the service port and the health check's, from the ALB."""
        for port in sorted({config.traffic_port, config.health_check_port}):
            self._authorize(
                config.resources["security_group"],
                {
                    "IpProtocol": "tcp",
                    "FromPort": port,
                    "ToPort": port,
                    "UserIdGroupPairs": [{"GroupId": lb_group_id, "Description": "from the ALB"}],
                },
            )

    def _close_from_lb(self, config: InfraConfig, lb_group_id: str, keep: set[int]) -> None:
        """Take back the ALB's access to the VMs on ports other than `keep` (an earlier check's)."""
        ec2, vm_group_id = self.client("ec2"), config.resources["security_group"]
        [vm_group] = ec2.describe_security_groups(GroupIds=[vm_group_id])["SecurityGroups"]
        stale = [
            {"IpProtocol": rule["IpProtocol"], "FromPort": rule["FromPort"],
             "ToPort": rule["ToPort"], "UserIdGroupPairs": pairs}
            for rule in vm_group.get("IpPermissions", [])
            if rule.get("FromPort") not in keep
            and (pairs := [p for p in rule.get("UserIdGroupPairs", [])
                           if p.get("GroupId") == lb_group_id])
        ]  # fmt: skip
        if stale:
            ec2.revoke_security_group_ingress(GroupId=vm_group_id, IpPermissions=stale)

    def _authorize(self, group_id: str, permission: dict[str, Any]) -> None:
        try:
            self.client("ec2").authorize_security_group_ingress(
                GroupId=group_id, IpPermissions=[permission]
            )
        except ClientError as error:
            if _code(error) != "InvalidPermission.Duplicate":
                raise

    @_mapped
    def create_target_group(self, config: InfraConfig, ctx: StepContext) -> str:
        """The target group with the health check, and the VMs (or the ASG) registered in it."""
        elbv2 = self.client("elbv2")
        group = self._existing(ctx, lambda: self._target_group(ctx))
        if group is None:
            group = elbv2.create_target_group(
                Name=ctx.resource_name("tg"),
                Protocol="HTTP",
                Port=config.traffic_port,
                VpcId=config.resources["vpc"],
                TargetType="instance",
                HealthCheckProtocol="HTTP",
                HealthCheckPath=config.health_check_path,
                HealthCheckPort=str(config.health_check_port),
                Tags=_tag_list(self._tags(ctx, "tg")),
            )["TargetGroups"][0]
            ctx.log(
                f"created target group (health check GET {config.health_check_path} "
                f"on {config.health_check_port})"
            )
        arn = self._record(config, ctx, "target_group", group["TargetGroupArn"])
        if config.pool_mode == PoolMode.ASG:
            self.client("autoscaling").attach_load_balancer_target_groups(
                AutoScalingGroupName=config.resources["asg"], TargetGroupARNs=[arn]
            )
            return f"Target group attached to {config.resources['asg']}."
        targets = [{"Id": vm.instance_id} for vm in config.vms if vm.state != "terminated"]
        if targets:
            elbv2.register_targets(TargetGroupArn=arn, Targets=targets)
        return f"Target group with {len(targets)} VM(s) registered."

    @_mapped
    def create_listener(self, config: InfraConfig, ctx: StepContext) -> str:
        elbv2 = self.client("elbv2")
        lb_arn = config.resources["load_balancer"]
        listeners = (
            self._existing(
                ctx, lambda: elbv2.describe_listeners(LoadBalancerArn=lb_arn)["Listeners"]
            )
            or []
        )
        listener = next((item for item in listeners if item["Port"] == LISTENER_PORT), None)
        if listener is None:
            listener = elbv2.create_listener(
                LoadBalancerArn=lb_arn,
                Protocol="HTTP",
                Port=LISTENER_PORT,
                DefaultActions=[
                    {"Type": "forward", "TargetGroupArn": config.resources["target_group"]}
                ],
                Tags=_tag_list(self._tags(ctx, "listener")),
            )["Listeners"][0]
            ctx.log(f"created listener on port {LISTENER_PORT}")
        self._record(config, ctx, "listener", listener["ListenerArn"])
        return f"Listener HTTP :{LISTENER_PORT} → target group."

    def _hosted_zone(self, config: InfraConfig, ctx: StepContext, create: bool) -> str | None:
        """The zone the DNS name goes in. It is looked up on every attempt: it may be the user's
        own. One whose caller reference is the job's is the job's, even if an attempt cut short
        never tagged or recorded it; it is tagged and recorded now, so teardown deletes it.
        Route 53 never takes a caller reference twice, and a job that detached its load balancer
        (deleting its zone) may attach one again: the reference names the step too."""
        route53 = self.client("route53")
        zone_name = config.dns_name.split(".", 1)[1].rstrip(".") + "."
        ours = f"zopday-{ctx.token}-zone"
        found = route53.list_hosted_zones_by_name(DNSName=zone_name, MaxItems="1")["HostedZones"]
        if found and found[0]["Name"] == zone_name:
            zone_id = str(found[0]["Id"]).split("/")[-1]
            if str(found[0].get("CallerReference", "")).startswith(ours):
                if create:
                    self._tag_zone(ctx, zone_id)
                config.resources["hosted_zone_created"] = zone_id
            return zone_id
        if not create:
            return None
        zone = route53.create_hosted_zone(
            Name=zone_name,
            CallerReference=f"{ours}-{ctx.step_id}",
            HostedZoneConfig={"Comment": f"ZopDay {ctx.name}", "PrivateZone": False},
        )["HostedZone"]
        zone_id = str(zone["Id"]).split("/")[-1]
        self._tag_zone(ctx, zone_id)
        config.resources["hosted_zone_created"] = zone_id
        ctx.log(f"created hosted zone {zone_name}")
        return zone_id

    def _tag_zone(self, ctx: StepContext, zone_id: str) -> None:
        self.client("route53").change_tags_for_resource(
            ResourceType="hostedzone",
            ResourceId=zone_id,
            AddTags=_tag_list(self._tags(ctx, "hosted-zone")),
        )

    def _alias_change(self, config: InfraConfig, action: str) -> dict[str, Any]:
        return {
            "Action": action,
            "ResourceRecordSet": {
                "Name": config.dns_name.rstrip(".") + ".",
                "Type": "A",
                "AliasTarget": {
                    "HostedZoneId": config.resources.get("load_balancer_zone", ""),
                    "DNSName": config.resources.get("load_balancer_dns", ""),
                    "EvaluateTargetHealth": False,
                },
            },
        }

    @_mapped
    def create_dns_record(self, config: InfraConfig, ctx: StepContext) -> str:
        if not config.dns_name:
            return "No DNS name was asked for: the load balancer answers on its own name."
        zone_id = self._hosted_zone(config, ctx, create=True)
        self._record(config, ctx, "hosted_zone", str(zone_id))
        self.client("route53").change_resource_record_sets(
            HostedZoneId=zone_id, ChangeBatch={"Changes": [self._alias_change(config, "UPSERT")]}
        )
        self._record(config, ctx, "dns_record", config.dns_name)
        return f"{config.dns_name} → {config.resources.get('load_balancer_dns')}."

    @_mapped
    def update_health_check(self, config: InfraConfig, ctx: StepContext) -> str:
        """The target group's health check moves to the config's path and port, which the
        VMs' security group then lets the ALB reach (and no other port from it but the traffic
        port). The traffic port stays the one the target group was made with (AWS fixes it);
        only the check changes."""
        group = self._target_group(ctx)
        if group is None:
            raise CloudError("The job's target group is gone: detach and attach the load balancer.")
        lb_group = config.resources["lb_security_group"]
        self._allow_from_lb(config, lb_group)
        self._close_from_lb(config, lb_group, keep={config.traffic_port, config.health_check_port})
        self.client("elbv2").modify_target_group(
            TargetGroupArn=group["TargetGroupArn"],
            HealthCheckProtocol="HTTP",
            HealthCheckPath=config.health_check_path,
            HealthCheckPort=str(config.health_check_port),
        )
        return f"Health check is now GET {config.health_check_path} on {config.health_check_port}."

    @_mapped
    def detach_load_balancer(self, config: InfraConfig, ctx: StepContext) -> str:
        """Remove the DNS record, the listener, the target group, the ALB, the VMs' inbound
        rule and the ALB's security group; the VMs themselves are not touched."""
        ec2, elbv2 = self.client("ec2"), self.client("elbv2")
        removed = []
        if config.dns_name:
            zone_id = self._hosted_zone(config, ctx, create=False)
            if zone_id:
                self._delete_record(zone_id, config)
                if config.resources.get("hosted_zone_created") == zone_id:
                    self.client("route53").delete_hosted_zone(Id=zone_id)
                removed.append("DNS record")
        lb = self._load_balancer(ctx)
        group = self._target_group(ctx)
        if lb is not None:
            for listener in elbv2.describe_listeners(LoadBalancerArn=lb["LoadBalancerArn"])[
                "Listeners"
            ]:
                elbv2.delete_listener(ListenerArn=listener["ListenerArn"])
            removed.append("listener")
        if group is not None and config.pool_mode == PoolMode.ASG and config.resources.get("asg"):
            try:
                self.client("autoscaling").detach_load_balancer_target_groups(
                    AutoScalingGroupName=config.resources["asg"],
                    TargetGroupARNs=[group["TargetGroupArn"]],
                )
            except ClientError as error:
                if _code(error) != "ValidationError":
                    raise
        if lb is not None:
            elbv2.delete_load_balancer(LoadBalancerArn=lb["LoadBalancerArn"])
            ctx.wait(
                "the load balancer to be deleted", lambda: self._load_balancer(ctx) is None,
                SETTLE_TIMEOUT,
            )  # fmt: skip
            removed.append("load balancer")
        if group is not None:
            elbv2.delete_target_group(TargetGroupArn=group["TargetGroupArn"])
            removed.append("target group")
        lb_group = self._security_group(ctx, "lb-sg")
        vm_group = self._security_group(ctx, "vm-sg")
        if lb_group is not None:
            if vm_group is not None:
                rules = [
                    rule
                    for rule in vm_group.get("IpPermissions", [])
                    if any(
                        p.get("GroupId") == lb_group["GroupId"]
                        for p in rule.get("UserIdGroupPairs", [])
                    )
                ]
                if rules:
                    ec2.revoke_security_group_ingress(
                        GroupId=vm_group["GroupId"], IpPermissions=rules
                    )
            ec2.delete_security_group(GroupId=lb_group["GroupId"])
            removed.append("load balancer security group")
        for kind in (
            "load_balancer", "load_balancer_dns", "load_balancer_zone", "target_group",
            "listener", "lb_security_group", "dns_record", "hosted_zone", "hosted_zone_created",
        ):  # fmt: skip
            config.resources.pop(kind, None)
        ctx.save()
        return f"Removed: {', '.join(removed)}." if removed else "No load balancer was attached."

    def _delete_record(self, zone_id: str, config: InfraConfig) -> None:
        route53 = self.client("route53")
        name = config.dns_name.rstrip(".") + "."
        records = route53.list_resource_record_sets(
            HostedZoneId=zone_id, StartRecordName=name, StartRecordType="A", MaxItems="1"
        )["ResourceRecordSets"]
        if not records or records[0]["Name"] != name or records[0]["Type"] != "A":
            return
        route53.change_resource_record_sets(
            HostedZoneId=zone_id,
            ChangeBatch={"Changes": [{"Action": "DELETE", "ResourceRecordSet": records[0]}]},
        )

    # ---- teardown ---------------------------------------------------------------------------
    @_mapped
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

    @_mapped
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

    @_mapped
    def delete_security_group(self, config: InfraConfig, ctx: StepContext) -> str:
        ec2 = self.client("ec2")
        groups = ec2.describe_security_groups(Filters=self._filters(ctx))["SecurityGroups"]
        for group in groups:
            ec2.delete_security_group(GroupId=group["GroupId"])
        config.resources.pop("security_group", None)
        ctx.save()
        return f"Deleted {len(groups)} security group(s)."

    @_mapped
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
            if _code(error) != "NoSuchEntity":
                raise
        try:
            for policy in iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]:
                iam.detach_role_policy(RoleName=name, PolicyArn=policy["PolicyArn"])
            iam.delete_role(RoleName=name)
            done.append("role")
        except ClientError as error:
            if _code(error) != "NoSuchEntity":
                raise
        config.resources.pop("iam_role", None)
        config.resources.pop("instance_profile", None)
        ctx.save()
        return f"Deleted the IAM {' and '.join(done)} {name}." if done else "No IAM role left."

    @_mapped
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

    @_mapped
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
