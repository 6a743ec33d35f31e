"""The AWS load balancer: an internet-facing ALB in the public subnets, a target group over the
VMs or the ASG, an HTTP listener and an optional Route 53 alias record; and the VM operations
that attach, detach and re-check it."""

from typing import Any

from botocore.exceptions import ClientError

from provisioning.choices import PoolMode
from provisioning.clouds.aws.base import SETTLE_TIMEOUT, AwsBase
from provisioning.clouds.aws.sdk import error_code, mapped, tag_list
from provisioning.clouds.context import StepContext
from provisioning.clouds.errors import CloudError
from provisioning.infra import InfraConfig

LISTENER_PORT = 80


class AwsLoadBalancer(AwsBase):
    def _load_balancer(self, ctx: StepContext) -> Any:
        try:
            found = self.client("elbv2").describe_load_balancers(Names=[ctx.resource_name("lb")])
        except ClientError as error:
            if error_code(error) == "LoadBalancerNotFound":
                return None
            raise
        return next(
            (
                lb
                for lb in found["LoadBalancers"]
                if lb["LoadBalancerName"] == ctx.resource_name("lb")
            ),
            None,
        )

    def _target_group(self, ctx: StepContext) -> Any:
        try:
            found = self.client("elbv2").describe_target_groups(Names=[ctx.resource_name("tg")])
        except ClientError as error:
            if error_code(error) == "TargetGroupNotFound":
                return None
            raise
        return next(
            (
                tg
                for tg in found["TargetGroups"]
                if tg["TargetGroupName"] == ctx.resource_name("tg")
            ),
            None,
        )

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

    @mapped
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
                Tags=tag_list(self._tags(ctx, "lb")),
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
            if error_code(error) != "InvalidPermission.Duplicate":
                raise

    @mapped
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
                Tags=tag_list(self._tags(ctx, "tg")),
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

    @mapped
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
                Tags=tag_list(self._tags(ctx, "listener")),
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
            AddTags=tag_list(self._tags(ctx, "hosted-zone")),
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

    @mapped
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

    @mapped
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

    @mapped
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
                    try:
                        self.client("route53").delete_hosted_zone(Id=zone_id)
                    except ClientError as error:
                        if error_code(error) != "HostedZoneNotEmpty":
                            raise
                        ctx.log(
                            f"kept the hosted zone {zone_id}: it holds records the job did not make"
                        )
                    config.resources.pop("hosted_zone_created", None)
                    ctx.save()
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
                if error_code(error) != "ValidationError":
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
        # Only the record aliasing the job's own load balancer: one another job or the user
        # made for the name stays.
        target = str(records[0].get("AliasTarget", {}).get("DNSName", "")).rstrip(".").lower()
        if target != config.resources.get("load_balancer_dns", "").rstrip(".").lower():
            return
        route53.change_resource_record_sets(
            HostedZoneId=zone_id,
            ChangeBatch={"Changes": [{"Action": "DELETE", "ResourceRecordSet": records[0]}]},
        )
