"""AWS stepCreateVMs and stepTerminateVMs: instances from the launch template (Fixed) or an
auto scaling group (ASG), the readiness wait through SSM, and what EC2 says of them."""

import time
from typing import Any

from botocore.exceptions import ClientError

from provisioning.choices import PoolMode, VmState
from provisioning.clouds.aws.base import SETTLE_TIMEOUT, AwsBase, carries_job_tags
from provisioning.clouds.aws.sdk import error_code, mapped
from provisioning.clouds.context import StepContext, poll_delays, wait_for_sentinels
from provisioning.infra import InfraConfig, VmRecord

LIVE_INSTANCE_STATES = ["pending", "running", "stopping", "stopped"]


class AwsVms(AwsBase):
    # ---- VMs --------------------------------------------------------------------------------
    def _live_instances(self, ctx: StepContext) -> list[dict[str, Any]]:
        ec2 = self.client("ec2")
        filters = [
            *self._filters(ctx, "vm"),
            {"Name": "instance-state-name", "Values": LIVE_INSTANCE_STATES},
        ]
        instances: list[dict[str, Any]] = []
        for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page["Reservations"]:
                instances.extend(
                    i
                    for i in reservation["Instances"]
                    if carries_job_tags(i.get("Tags"), ctx, "vm")
                )
        return sorted(instances, key=lambda i: (str(i.get("LaunchTime", "")), i["InstanceId"]))

    def _auto_scaling_groups(self, ctx: StepContext) -> list[dict[str, Any]]:
        """The job's auto scaling group, if it exists: by its name, and its tags checked."""
        name = ctx.resource_name("asg")
        groups = self.client("autoscaling").describe_auto_scaling_groups(
            AutoScalingGroupNames=[name]
        )["AutoScalingGroups"]
        return [
            group for group in groups
            if group["AutoScalingGroupName"] == name and carries_job_tags(group.get("Tags"), ctx)
        ]  # fmt: skip

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
            groups = self._existing(ctx, lambda: self._auto_scaling_groups(ctx))
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
            shell="open the VM through the SSM exec channel", present_first=True,
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
        deadline = time.monotonic() + 15
        for delay in poll_delays(0.5):  # a command takes about a second on EC2, none on moto
            try:
                result = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
            except ClientError as error:
                if error_code(error) != "InvocationDoesNotExist":
                    raise
                status = "Pending"
            else:
                status = result["Status"]
            if status not in {"Pending", "InProgress", "Delayed"}:
                return bool(status == "Success")
            if time.monotonic() + delay > deadline:
                return False
            time.sleep(delay)
        return False

    @mapped
    def delete_vms(self, config: InfraConfig, ctx: StepContext) -> str:
        """Fixed: terminate. ASG: min = max = desired = 0, then delete the group."""
        group_name = ctx.resource_name("asg")
        autoscaling = self.client("autoscaling")
        if self._auto_scaling_groups(ctx):
            autoscaling.update_auto_scaling_group(
                AutoScalingGroupName=group_name, MinSize=0, MaxSize=0, DesiredCapacity=0
            )
            ctx.log(f"{group_name}: min = max = desired = 0")
            autoscaling.delete_auto_scaling_group(AutoScalingGroupName=group_name, ForceDelete=True)
            ctx.wait(
                f"{group_name} to be deleted",
                lambda: not self._auto_scaling_groups(ctx),
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
