"""GCP through google-cloud-compute: a VPC network with Cloud NAT, a service account, an
instance template, and instances or a regional managed instance group (MIG).

Every resource has a deterministic name (`zopday-<name>-<token>-<suffix>`) and the job's labels,
so a step simply makes what it needs: a 409 on insert means an earlier attempt made it, and no
lookup is needed first. The VMs have no public address and no SSH keys: the job's
firewall rules deny all ingress to them but port 22 from Google's IAP proxies, so a shell is
reached only through IAP with OS Login, both IAM-gated; the OS Config agent is enabled. The
bootstrap reports its sentinel through a guest attribute that stepCreateVMs reads.
"""

import ipaddress
from functools import partial

from google.cloud import compute_v1

from provisioning.choices import NetworkMode, PoolMode, VmState
from provisioning.infra import InfraConfig, VmRecord
from provisioning.providers.base import CloudError, StepContext, wait_for_sentinels
from provisioning.providers.gcp_base import SETTLE_TIMEOUT
from provisioning.providers.gcp_lb import GcpLoadBalancer
from provisioning.providers.gcp_power import describe
from provisioning.providers.gcp_sdk import (
    CLOUD_PLATFORM,
    RETRYABLE_OPERATION_CODES,
    exists_already,
    google_api,
    key_info,
    mapped,
    not_found,
    short,
)

DEFAULT_IMAGE = ("ubuntu-os-cloud", "ubuntu-2404-lts-amd64")  # ships cloud-init and OS Config
# Google's IAP TCP forwarding proxies: the only source that may reach a VM's port 22, and only
# for someone IAM lets tunnel (iap.tunnelInstances.accessViaIAP) and OS Login lets in.
IAP_RANGE = "35.235.240.0/20"
GUEST_NAMESPACE = "zopday"
GUEST_KEY = "bootstrap"


class GcpProvider(GcpLoadBalancer):
    """VM environments on GCP, the same shape as on AWS: private subnetwork, NAT egress, no
    public SSH, exec through the cloud's IAM-gated channel."""

    name = "gcp"

    # ---- connection and validation ----------------------------------------------------------
    @mapped
    def check_connection(self) -> str:
        email = key_info(self.account)["client_email"]
        zones = self._zones()
        return (
            f"Connected as {email} (project {self.project}); {len(zones)} zones in {self.region}."
        )

    @mapped
    def validate(self, config: InfraConfig, ctx: StepContext) -> str:
        region_zones = self._zones()
        zones = self._offering(config.instance_type, region_zones)
        config.resources["zones"] = ",".join(zones)
        ctx.log(f"credentials valid; zones: {', '.join(region_zones)}")
        if missing := [zone for zone in region_zones if zone not in zones]:
            ctx.log(
                f"{config.instance_type} is not offered in {', '.join(missing)}: "
                f"the VMs go to {', '.join(zones)}"
            )
        if config.network_mode == NetworkMode.EXISTING:
            network = not_found(
                lambda: self.client(compute_v1.NetworksClient).get(
                    project=self.project, network=config.existing_vpc_id
                )
            )
            if network is None:
                raise CloudError(
                    f"The network {config.existing_vpc_id} does not exist in project "
                    f"{self.project}."
                )
            subnetwork = not_found(
                lambda: self.client(compute_v1.SubnetworksClient).get(
                    project=self.project,
                    region=self.region,
                    subnetwork=config.existing_subnet_id,
                )
            )
            if subnetwork is None:
                raise CloudError(
                    f"The subnetwork {config.existing_subnet_id} does not exist in {self.region}."
                )
            if short(subnetwork.network) != short(network.self_link):
                raise CloudError(
                    f"The subnetwork {config.existing_subnet_id} is in the network "
                    f"{short(subnetwork.network)}, not in {config.existing_vpc_id}."
                )
            ctx.log(
                f"existing network {config.existing_vpc_id}, subnetwork {config.existing_subnet_id}"
            )
        if config.image_id:
            self._check_image(config.image_id)
            ctx.log(f"image {config.image_id}")
        else:
            project, family = DEFAULT_IMAGE
            image = self.client(compute_v1.ImagesClient).get_from_family(
                project=project, family=family
            )
            config.image_id = f"projects/{project}/global/images/{image.name}"
            ctx.log(f"image {config.image_id} (family {family})")
        ctx.save()
        return f"Credentials, region {self.region} and image {short(config.image_id)} checked."

    def _check_image(self, image_id: str) -> None:
        """The image a job asked for exists: a name (of the account's project), or a
        projects/.../global/images/[family/]NAME path."""
        path = image_id.split("projects/", 1)[-1] if "projects/" in image_id else ""
        project, _, rest = path.partition("/global/images/") if path else ("", "", image_id)
        images = self.client(compute_v1.ImagesClient)
        if rest.startswith("family/"):
            family = rest.removeprefix("family/")
            found = not_found(
                lambda: images.get_from_family(project=project or self.project, family=family)
            )
        else:
            found = not_found(lambda: images.get(project=project or self.project, image=rest))
        if found is None:
            raise CloudError(
                f"The image {image_id} does not exist, or this account may not use it: give "
                "another image, or none for the default."
            )

    def _offering(self, machine_type: str, zones: list[str]) -> list[str]:
        """Those of `zones` that offer the machine type: one aggregated list for the project."""
        request = compute_v1.AggregatedListMachineTypesRequest(
            project=self.project, filter=f'name = "{machine_type}"'
        )
        listed = self.client(compute_v1.MachineTypesClient).aggregated_list(request=request)
        offered = {short(scope) for scope, found in listed if found.machine_types}
        chosen = [zone for zone in zones if zone in offered]
        if not chosen:
            raise CloudError(
                f"The machine type {machine_type} is not offered in any zone of {self.region}: "
                "choose another machine type or region."
            )
        return chosen

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

    # ---- IAM --------------------------------------------------------------------------------
    def _service_account_id(self, ctx: StepContext) -> str:
        return f"zopday-{ctx.token}"

    @mapped
    def create_iam(self, config: InfraConfig, ctx: StepContext) -> str:
        """The VMs' own service account, with no roles: it identifies them to the OS Config
        agent and grants nothing else."""
        account_id = self._service_account_id(ctx)
        email = f"{account_id}@{self.project}.iam.gserviceaccount.com"
        try:
            google_api(
                self.account,
                "iam",
                "POST",
                f"v1/projects/{self.project}/serviceAccounts",
                json={
                    "accountId": account_id,
                    "serviceAccount": {"displayName": f"ZopDay VMs of {ctx.name}"},
                },
            )
            ctx.log(f"created service account {email}")
        except CloudError as error:
            if error.code not in {"ALREADY_EXISTS", "409"}:
                raise
        self._record(config, ctx, "service_account", email)
        return f"Service account {email} (no roles; exec through IAP and OS Login)."

    # ---- instance template ------------------------------------------------------------------
    @mapped
    def create_launch_template(self, config: InfraConfig, ctx: StepContext, user_data: str) -> str:
        """Firewall rules for the job's VMs: all ingress denied, whatever else the network
        allows, but port 22 from IAP's proxies. Then the instance template: the user data, the
        service account, OS Login, Shielded VM, no public address and no SSH keys."""
        rule, _ = self._vm_firewall(
            config, ctx, "deny-in", priority=1000, sources=["0.0.0.0/0"],
            denied=[compute_v1.Denied(I_p_protocol="all")],
            description="ZopDay VMs: no inbound but what the job's other rules allow",
        )  # fmt: skip
        self._record(config, ctx, "security_group", rule)
        self._vm_firewall(
            config, ctx, "iap-ssh", priority=900, sources=[IAP_RANGE],
            allowed=[compute_v1.Allowed(I_p_protocol="tcp", ports=["22"])],
            description="ZopDay VMs: SSH only through IAP, gated by IAM and OS Login",
        )  # fmt: skip

        templates = self.client(compute_v1.InstanceTemplatesClient)
        name = ctx.resource_name("tpl")
        self._ensure(
            ctx,
            lambda: templates.insert_unary(
                project=self.project,
                instance_template_resource=compute_v1.InstanceTemplate(
                    name=name,
                    description=f"ZopDay {ctx.name}",
                    properties=self._properties(config, ctx, user_data),
                ),
            ),
            f"created instance template {name}",
        )
        template = self._record(
            config, ctx, "launch_template", self._link(f"global/instanceTemplates/{name}")
        )
        return f"Instance template {short(template)} with firewall rule {rule}."

    def _properties(
        self, config: InfraConfig, ctx: StepContext, user_data: str
    ) -> compute_v1.InstanceProperties:
        metadata = {
            "user-data": user_data,
            "enable-oslogin": "TRUE",
            "enable-osconfig": "TRUE",
            "enable-guest-attributes": "TRUE",
            "block-project-ssh-keys": "TRUE",
        }
        return compute_v1.InstanceProperties(
            machine_type=config.instance_type,
            labels=self._labels(ctx, "vm"),
            tags=compute_v1.Tags(items=[self._network_tag(ctx)]),
            disks=[
                compute_v1.AttachedDisk(
                    boot=True,
                    auto_delete=True,
                    type_="PERSISTENT",
                    initialize_params=compute_v1.AttachedDiskInitializeParams(
                        source_image=config.image_id,
                        disk_size_gb=config.disk_gb,
                        disk_type="pd-balanced",
                        labels=self._labels(ctx, "volume"),
                    ),
                )
            ],
            network_interfaces=[
                compute_v1.NetworkInterface(
                    network=config.resources["vpc"],
                    subnetwork=config.resources["private_subnet"],
                )  # no access config: no public address
            ],
            service_accounts=[
                compute_v1.ServiceAccount(
                    email=config.resources["service_account"], scopes=[CLOUD_PLATFORM]
                )
            ],
            metadata=compute_v1.Metadata(
                items=[compute_v1.Items(key=k, value=v) for k, v in metadata.items()]
            ),
            shielded_instance_config=compute_v1.ShieldedInstanceConfig(
                enable_secure_boot=True, enable_vtpm=True, enable_integrity_monitoring=True
            ),
        )

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
    def delete_launch_template(self, config: InfraConfig, ctx: StepContext) -> str:
        deleted = self._delete(
            ctx,
            lambda: self.client(compute_v1.InstanceTemplatesClient).delete_unary(
                project=self.project, instance_template=ctx.resource_name("tpl")
            ),
        )
        config.resources.pop("launch_template", None)
        ctx.save()
        return "Deleted the instance template." if deleted else "No instance template to delete."

    @mapped
    def delete_security_group(self, config: InfraConfig, ctx: StepContext) -> str:
        """The job's firewall rules, by their names (the load balancer's went with it)."""
        firewalls = self.client(compute_v1.FirewallsClient)
        deleted = [
            name
            for name in (ctx.resource_name("deny-in"), ctx.resource_name("iap-ssh"))
            if self._delete(
                ctx, partial(firewalls.delete_unary, project=self.project, firewall=name)
            )
        ]
        config.resources.pop("security_group", None)
        ctx.save()
        return f"Deleted {len(deleted)} firewall rule(s)."

    @mapped
    def delete_iam(self, config: InfraConfig, ctx: StepContext) -> str:
        email = f"{self._service_account_id(ctx)}@{self.project}.iam.gserviceaccount.com"
        path = f"v1/projects/{self.project}/serviceAccounts/{email}"
        found = google_api(self.account, "iam", "DELETE", path)
        config.resources.pop("service_account", None)
        ctx.save()
        return (
            f"Deleted the service account {email}."
            if found is not None
            else ("No service account left.")
        )

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

    @mapped
    def describe_vms(self, config: InfraConfig, ctx: StepContext) -> list[dict[str, str]]:
        """The job's VMs as GCE reports them now, in the console's words."""
        described = []
        for vm in config.vms:
            instance = self._instance(vm.zone, vm.instance_id)
            if instance is not None:
                described.append(describe(instance))
        return described
