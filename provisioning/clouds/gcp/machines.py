"""GCP stepValidate, stepCreateIAM and stepCreateLaunchTemplate, and their teardown: the
account's check, a service account with no roles, the firewall rules (all ingress denied but
IAP's port 22) and a Shielded VM instance template."""

from functools import partial

from google.cloud import compute_v1

from provisioning.choices import NetworkMode
from provisioning.clouds.context import StepContext
from provisioning.clouds.errors import CloudError
from provisioning.clouds.gcp.base import GcpBase
from provisioning.clouds.gcp.sdk import (
    CLOUD_PLATFORM,
    google_api,
    key_info,
    mapped,
    not_found,
    short,
)
from provisioning.infra import InfraConfig

DEFAULT_IMAGE = ("ubuntu-os-cloud", "ubuntu-2404-lts-amd64")  # ships cloud-init and OS Config
# Google's IAP TCP forwarding proxies: the only source that may reach a VM's port 22, and only
# for someone IAM lets tunnel (iap.tunnelInstances.accessViaIAP) and OS Login lets in.
IAP_RANGE = "35.235.240.0/20"


class GcpMachines(GcpBase):
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

    # ---- teardown ---------------------------------------------------------------------------
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
