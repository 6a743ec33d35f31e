"""AWS stepValidate, stepCreateIAM and stepCreateLaunchTemplate, and their teardown: the
account's check, an IAM role for SSM, a security group with no inbound rules and a launch
template; each found by its tags or name before made."""

import base64
import json
from typing import Any

from botocore.exceptions import ClientError

from provisioning.choices import NetworkMode, PoolMode
from provisioning.clouds.aws.base import AwsBase
from provisioning.clouds.aws.sandbox import sandbox_epoch
from provisioning.clouds.aws.sdk import (
    NOT_AWS,
    available_zones,
    client_for,
    error_code,
    get_or_none,
    mapped,
    tag_list,
)
from provisioning.clouds.context import StepContext
from provisioning.clouds.errors import CloudError
from provisioning.infra import InfraConfig

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


class AwsMachines(AwsBase):
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
                ec2.describe_launch_templates, "LaunchTemplates", ctx, "launch-template"
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

    # ---- teardown ---------------------------------------------------------------------------
    @mapped
    def delete_launch_template(self, config: InfraConfig, ctx: StepContext) -> str:
        ec2 = self.client("ec2")
        templates = self._owned(
            ec2.describe_launch_templates, "LaunchTemplates", ctx, "launch-template"
        )
        for template in templates:
            ec2.delete_launch_template(LaunchTemplateId=template["LaunchTemplateId"])
        config.resources.pop("launch_template", None)
        ctx.save()
        return "Deleted the launch template." if templates else "No launch template to delete."

    @mapped
    def delete_security_group(self, config: InfraConfig, ctx: StepContext) -> str:
        ec2 = self.client("ec2")
        groups = self._owned(ec2.describe_security_groups, "SecurityGroups", ctx)
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
