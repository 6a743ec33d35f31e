"""GCP stepCreateVMs and stepTerminateVMs: instances spread over the region's zones (Fixed) or
a regional managed instance group (ASG), and the readiness wait on the bootstrap's guest
attribute."""

from functools import partial

from google.cloud import compute_v1

from provisioning.choices import PoolMode, VmState
from provisioning.clouds.context import StepContext, wait_for_sentinels
from provisioning.clouds.errors import CloudError
from provisioning.clouds.gcp.base import SETTLE_TIMEOUT, GcpBase
from provisioning.clouds.gcp.instances import describe
from provisioning.clouds.gcp.sdk import (
    RETRYABLE_OPERATION_CODES,
    exists_already,
    mapped,
    not_found,
    short,
)
from provisioning.infra import InfraConfig, VmRecord

GUEST_NAMESPACE = "zopday"
GUEST_KEY = "bootstrap"


class GcpVms(GcpBase):
    # ---- VMs --------------------------------------------------------------------------------
    def _fixed_names(self, config: InfraConfig, ctx: StepContext) -> list[tuple[str, str]]:
        """(name, zone) of each VM of a fixed pool: spread over the region's zones."""
        zones = self._zone_list(config)
        return [
            (ctx.resource_name(f"vm-{n}"), zones[(n - 1) % len(zones)])
            for n in range(1, config.instance_count + 1)
            if zones
        ]

    def _remember_vms(self, config: InfraConfig, found: list[compute_v1.Instance]) -> None:
        known = {vm.instance_id: vm for vm in config.vms}
        config.vms = [
            known.get(instance.name)
            or VmRecord(
                instance_id=instance.name,
                state=VmState.LAUNCHING,
                private_ip=describe(instance)["private_ip"],
                zone=short(instance.zone),
            )
            for instance in found
        ]

    @mapped
    def create_vms(self, config: InfraConfig, ctx: StepContext) -> str:
        """Fixed: the missing instances from the template. ASG: a regional managed instance
        group of the desired size, with an autoscaler between min and max when they differ."""
        template = config.resources["launch_template"]
        if config.pool_mode == PoolMode.FIXED:
            found = self._launch_fixed(config, ctx, template)
        else:
            found = self._create_group(config, ctx, template)
        self._remember_vms(config, found)
        ctx.save()
        return f"{len(found)} VM(s): {', '.join(i.name for i in found)}."

    def _launch_fixed(
        self, config: InfraConfig, ctx: StepContext, template: str
    ) -> list[compute_v1.Instance]:
        """Insert every missing VM, then wait for all the inserts: they run side by side."""
        instances = self.client(compute_v1.InstancesClient)
        names = self._fixed_names(config, ctx)
        launching = []
        for name, zone in names:
            insert = partial(
                instances.insert_unary,
                compute_v1.InsertInstanceRequest(
                    project=self.project,
                    zone=zone,
                    source_instance_template=template,
                    instance_resource=compute_v1.Instance(
                        name=name, labels=self._labels(ctx, "vm")
                    ),
                ),
            )
            if (operation := exists_already(insert)) is not None:
                launching.append((name, zone, operation))
        for name, zone, operation in launching:
            self._done(ctx, operation)
            ctx.log(f"launched {name} in {zone}")
        return [
            instances.get(project=self.project, zone=zone, instance=name) for name, zone in names
        ]

    def _create_group(
        self, config: InfraConfig, ctx: StepContext, template: str
    ) -> list[compute_v1.Instance]:
        groups = self.client(compute_v1.RegionInstanceGroupManagersClient)
        name = ctx.resource_name("mig")
        self._ensure(
            ctx,
            lambda: groups.insert_unary(
                project=self.project,
                region=self.region,
                instance_group_manager_resource=compute_v1.InstanceGroupManager(
                    name=name,
                    base_instance_name=ctx.resource_name("vm"),
                    instance_template=template,
                    target_size=config.asg_desired,
                    description=f"ZopDay {ctx.name}",
                    # the zones stepValidate kept: those that offer the machine type
                    distribution_policy=compute_v1.DistributionPolicy(
                        zones=[
                            compute_v1.DistributionPolicyZoneConfiguration(
                                zone=self._link(f"zones/{zone}")
                            )
                            for zone in self._zone_list(config)
                        ]
                    ),
                ),
            ),
            f"created managed instance group {name} (size {config.asg_desired})",
        )
        group = self._record(
            config, ctx, "asg", self._link(f"regions/{self.region}/instanceGroupManagers/{name}")
        )
        if config.asg_min != config.asg_max:
            self._ensure_autoscaler(config, ctx, group)
        members: list[compute_v1.Instance] = []

        def group_full() -> bool:
            nonlocal members
            members = self._group_members(name)
            return len(members) >= config.asg_desired

        ctx.wait(f"{name} to create its instances", group_full, SETTLE_TIMEOUT)
        return members

    def _ensure_autoscaler(self, config: InfraConfig, ctx: StepContext, group: str) -> None:
        autoscalers = self.client(compute_v1.RegionAutoscalersClient)
        name = ctx.resource_name("scaler")
        self._ensure(
            ctx,
            lambda: autoscalers.insert_unary(
                project=self.project,
                region=self.region,
                autoscaler_resource=compute_v1.Autoscaler(
                    name=name,
                    target=group,
                    autoscaling_policy=compute_v1.AutoscalingPolicy(
                        min_num_replicas=config.asg_min,
                        max_num_replicas=config.asg_max,
                        mode="ON",
                        cpu_utilization=compute_v1.AutoscalingPolicyCpuUtilization(
                            utilization_target=0.6
                        ),
                    ),
                ),
            ),
            f"created autoscaler {name} (min {config.asg_min}, max {config.asg_max})",
        )
        self._record(config, ctx, "autoscaler", name)

    def _group_members(self, group: str) -> list[compute_v1.Instance]:
        managed = self.client(compute_v1.RegionInstanceGroupManagersClient).list_managed_instances(
            project=self.project, region=self.region, instance_group_manager=group
        )
        members = []
        for item in managed:
            failures = list(item.last_attempt.errors.errors)
            if failures and item.current_action == "CREATING":
                # GCE keeps retrying in the background; the step stops with Google's reason.
                codes = {failure.code for failure in failures}
                raise CloudError(
                    f"The managed instance group {group} cannot create its VMs: "
                    + "; ".join(failure.message for failure in failures),
                    retryable=bool(codes & RETRYABLE_OPERATION_CODES),
                    code=failures[0].code,
                )
            if not item.instance or item.current_action == "DELETING":
                continue
            zone = item.instance.split("/zones/")[1].split("/")[0]
            instance = self._instance(zone, short(item.instance))
            if instance is not None:
                members.append(instance)
        return sorted(members, key=lambda i: i.name)

    @mapped
    def wait_until_ready(self, config: InfraConfig, ctx: StepContext) -> str:
        """Read every running VM's guest attribute zopday/bootstrap, which the user data sets
        once the sentinel is written, until all have it or the timeout passes."""

        def running(pending: list[VmRecord]) -> set[str]:
            found = {vm.instance_id: self._instance(vm.zone, vm.instance_id) for vm in pending}
            return {name for name, i in found.items() if i is not None and i.status == "RUNNING"}

        wait_for_sentinels(
            config, ctx, running=running, present=self._bootstrapped,
            shell="open a shell through IAP with OS Login",
        )  # fmt: skip
        return f"{len(config.vms)} VM(s) ready (sentinel reported as a guest attribute)."

    def _bootstrapped(self, vm: VmRecord) -> bool:
        attributes = not_found(
            lambda: self.client(compute_v1.InstancesClient).get_guest_attributes(
                compute_v1.GetGuestAttributesInstanceRequest(
                    project=self.project,
                    zone=vm.zone,
                    instance=vm.instance_id,
                    query_path=f"{GUEST_NAMESPACE}/",
                )
            )
        )
        if attributes is None:
            return False
        return any(
            item.key == GUEST_KEY and item.value == "ready" for item in attributes.query_value.items
        )

    # ---- teardown ---------------------------------------------------------------------------
    @mapped
    def delete_vms(self, config: InfraConfig, ctx: StepContext) -> str:
        """MIG: the autoscaler goes, the group is resized to 0, then deleted. Fixed: every VM
        of the job is deleted, with its boot disk."""
        groups = self.client(compute_v1.RegionInstanceGroupManagersClient)
        group = ctx.resource_name("mig")
        self._delete(
            ctx,
            lambda: self.client(compute_v1.RegionAutoscalersClient).delete_unary(
                project=self.project,
                region=self.region,
                autoscaler=ctx.resource_name("scaler"),
            ),
        )
        resized = not_found(
            lambda: groups.resize_unary(
                project=self.project,
                region=self.region,
                instance_group_manager=group,
                size=0,
            )
        )
        if resized is not None:
            self._done(ctx, resized)
            ctx.log(f"{group}: size 0")
            self._delete(
                ctx,
                lambda: groups.delete_unary(
                    project=self.project,
                    region=self.region,
                    instance_group_manager=group,
                ),
            )
            ctx.log(f"deleted managed instance group {group}")
        instances = self.client(compute_v1.InstancesClient)
        # The recorded VMs, and for a fixed pool every name it may have made (an attempt cut
        # short may have launched a VM it never recorded).
        names = {vm.instance_id: vm.zone for vm in config.vms if vm.zone}
        if config.pool_mode == PoolMode.FIXED:
            names.update(self._fixed_names(config, ctx))
        deleted = []
        for name, zone in sorted(names.items()):
            delete = partial(instances.delete_unary, project=self.project, zone=zone, instance=name)
            if self._delete(ctx, delete):
                deleted.append(name)
        if deleted:
            ctx.log(f"deleted {', '.join(deleted)}")
        for vm in config.vms:
            vm.state = VmState.TERMINATED
        config.resources.pop("asg", None)
        config.resources.pop("autoscaler", None)
        ctx.save()
        return f"Deleted {len(deleted)} VM(s)." if deleted else "No VMs were left."

    @mapped
    def describe_vms(self, config: InfraConfig, ctx: StepContext) -> list[dict[str, str]]:
        """The job's VMs as GCE reports them now, in the console's words."""
        described = []
        for vm in config.vms:
            instance = self._instance(vm.zone, vm.instance_id)
            if instance is not None:
                described.append(describe(instance))
        return described
