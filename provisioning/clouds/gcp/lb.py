"""The load balancer of a GCP job: a global external Application Load Balancer.

stepCreateLoadBalancer: a firewall rule letting Google's front ends and health checkers reach
the VMs on the service and health check ports, a global address and the HTTP health check.
stepCreateTargetGroup: the backend service, whose backends are the MIG's instance group or, for
a fixed pool, one unmanaged instance group per zone. stepCreateListener: URL map, target HTTP
proxy and the forwarding rule on port 80. stepCreateDNSRecord: an A record in a Cloud DNS zone
(the user's, or one the job makes). Detaching removes them in reverse; the VMs stay.
"""

from functools import partial

from google.cloud import compute_v1

from provisioning.choices import PoolMode, VmState
from provisioning.clouds.context import StepContext
from provisioning.clouds.errors import CloudError
from provisioning.clouds.gcp.dns import GcpDns
from provisioning.clouds.gcp.sdk import mapped, not_found, short
from provisioning.infra import InfraConfig

# Where Google's load balancer front ends and health checks come from.
LB_RANGES = ["130.211.0.0/22", "35.191.0.0/16"]
LISTENER_PORT = 80
PORT_NAME = "http"
SCHEME = "EXTERNAL_MANAGED"
LB_RESOURCES = (
    "load_balancer", "load_balancer_dns", "health_check", "lb_security_group", "target_group",
    "listener", "url_map", "http_proxy", "dns_record", "hosted_zone", "hosted_zone_created",
)  # fmt: skip


class GcpLoadBalancer(GcpDns):
    """The four LB steps, the health check change and the detach, on GCP."""

    def _global(self, path: str) -> str:
        return self._link(f"global/{path}")

    # ---- stepCreateLoadBalancer -------------------------------------------------------------
    def _allow_from_lb(self, config: InfraConfig, ctx: StepContext) -> None:
        """The VMs accept the service port and the health check's from Google's front ends."""
        allowed = [
            compute_v1.Allowed(
                I_p_protocol="tcp",
                ports=[str(p) for p in sorted({config.traffic_port, config.health_check_port})],
            )
        ]
        name, made = self._vm_firewall(
            config, ctx, "lb-in", priority=900, sources=LB_RANGES, allowed=allowed,
            description="ZopDay VMs: from the job's load balancer",
        )  # fmt: skip
        firewalls = self.client(compute_v1.FirewallsClient)
        if not made:  # an earlier attempt or check made it: its ports are made to match
            self._done(
                ctx,
                firewalls.patch_unary(
                    project=self.project, firewall=name,
                    firewall_resource=compute_v1.Firewall(allowed=allowed),
                ),
            )  # fmt: skip
        self._record(config, ctx, "lb_security_group", name)

    def _health_check(self, config: InfraConfig) -> compute_v1.HTTPHealthCheck:
        return compute_v1.HTTPHealthCheck(
            port=config.health_check_port, request_path=config.health_check_path
        )

    @mapped
    def create_load_balancer(self, config: InfraConfig, ctx: StepContext) -> str:
        self._allow_from_lb(config, ctx)
        addresses = self.client(compute_v1.GlobalAddressesClient)
        name = ctx.resource_name("lb-ip")
        self._ensure(
            ctx,
            lambda: addresses.insert_unary(
                project=self.project,
                address_resource=compute_v1.Address(
                    name=name, ip_version="IPV4", labels=self._labels(ctx, "lb")
                ),
            ),
            f"reserved global address {name}",
        )
        address = addresses.get(project=self.project, address=name)
        self._record(config, ctx, "load_balancer", name)
        self._record(config, ctx, "load_balancer_dns", address.address)

        checks = self.client(compute_v1.HealthChecksClient)
        check = ctx.resource_name("hc")
        self._ensure(
            ctx,
            lambda: checks.insert_unary(
                project=self.project,
                health_check_resource=compute_v1.HealthCheck(
                    name=check, type_="HTTP", http_health_check=self._health_check(config),
                    check_interval_sec=10, timeout_sec=5,
                ),
            ),
            f"created health check GET {config.health_check_path} on {config.health_check_port}",
        )  # fmt: skip
        self._record(config, ctx, "health_check", check)
        return f"Load balancer address {address.address}."

    # ---- stepCreateTargetGroup --------------------------------------------------------------
    def _named_port(self, config: InfraConfig) -> list[compute_v1.NamedPort]:
        return [compute_v1.NamedPort(name=PORT_NAME, port=config.traffic_port)]

    def _group_of_mig(self, config: InfraConfig, ctx: StepContext) -> str:
        """The MIG's own (regional) instance group, serving on the traffic port."""
        manager = self.client(compute_v1.RegionInstanceGroupManagersClient).get(
            project=self.project,
            region=self.region,
            instance_group_manager=ctx.resource_name("mig"),
        )
        group = str(manager.instance_group)
        self._done(
            ctx,
            self.client(compute_v1.RegionInstanceGroupsClient).set_named_ports_unary(
                project=self.project, region=self.region, instance_group=short(group),
                region_instance_groups_set_named_ports_request_resource=(
                    compute_v1.RegionInstanceGroupsSetNamedPortsRequest(
                        named_ports=self._named_port(config)
                    )
                ),
            ),
        )  # fmt: skip
        return group

    def _zone_group_name(self, ctx: StepContext, zone: str) -> str:
        return ctx.resource_name(f"ig-{zone.rsplit('-', 1)[-1]}")

    def _groups_of_fixed_pool(self, config: InfraConfig, ctx: StepContext) -> list[str]:
        """One unmanaged instance group per zone of the pool, holding its VMs there."""
        groups = self.client(compute_v1.InstanceGroupsClient)
        by_zone: dict[str, list[str]] = {}
        for vm in config.vms:
            if vm.state != VmState.TERMINATED:
                by_zone.setdefault(vm.zone, []).append(vm.instance_id)
        links = []
        for zone, names in sorted(by_zone.items()):
            name = self._zone_group_name(ctx, zone)
            where = {"project": self.project, "zone": zone, "instance_group": name}
            members: set[str] = set()
            made = self._make(
                ctx,
                partial(
                    groups.insert_unary, project=self.project, zone=zone,
                    instance_group_resource=compute_v1.InstanceGroup(
                        name=name, network=config.resources["vpc"],
                        named_ports=self._named_port(config),
                    ),
                ),
            )  # fmt: skip
            if not made:  # an earlier attempt made it: it may hold some of the VMs already
                members = {short(item.instance) for item in groups.list_instances(**where)}
            missing = [n for n in names if n not in members]
            if missing:
                request = compute_v1.InstanceGroupsAddInstancesRequest(
                    instances=[
                        compute_v1.InstanceReference(
                            instance=self._link(f"zones/{zone}/instances/{n}")
                        )
                        for n in missing
                    ]
                )
                self._done(
                    ctx,
                    groups.add_instances_unary(
                        **where, instance_groups_add_instances_request_resource=request
                    ),
                )
            links.append(self._link(f"zones/{zone}/instanceGroups/{name}"))
        return links

    def backend_groups(self, config: InfraConfig, ctx: StepContext) -> list[str]:
        if config.pool_mode == PoolMode.ASG:
            return [self._group_of_mig(config, ctx)]
        return self._groups_of_fixed_pool(config, ctx)

    @mapped
    def create_target_group(self, config: InfraConfig, ctx: StepContext) -> str:
        groups = self.backend_groups(config, ctx)
        services = self.client(compute_v1.BackendServicesClient)
        name = ctx.resource_name("bes")
        check = self._global(f"healthChecks/{config.resources['health_check']}")
        self._ensure(
            ctx,
            lambda: services.insert_unary(
                project=self.project,
                backend_service_resource=compute_v1.BackendService(
                    name=name, protocol="HTTP", port_name=PORT_NAME, load_balancing_scheme=SCHEME,
                    health_checks=[check],
                    backends=[
                        compute_v1.Backend(group=group, balancing_mode="UTILIZATION")
                        for group in groups
                    ],
                ),
            ),
            f"created backend service {name} over {len(groups)} instance group(s)",
        )  # fmt: skip
        self._record(config, ctx, "target_group", name)
        return f"Backend service {name} with {len(groups)} instance group(s)."

    # ---- stepCreateListener -----------------------------------------------------------------
    @mapped
    def create_listener(self, config: InfraConfig, ctx: StepContext) -> str:
        """URL map → target HTTP proxy → forwarding rule on the address, port 80."""
        maps = self.client(compute_v1.UrlMapsClient)
        url_map = ctx.resource_name("urlmap")
        service = self._global(f"backendServices/{config.resources['target_group']}")
        self._ensure(
            ctx,
            lambda: maps.insert_unary(
                project=self.project,
                url_map_resource=compute_v1.UrlMap(name=url_map, default_service=service),
            ),
            f"created URL map {url_map}",
        )
        self._record(config, ctx, "url_map", url_map)
        proxies = self.client(compute_v1.TargetHttpProxiesClient)
        proxy = ctx.resource_name("proxy")
        self._ensure(
            ctx,
            lambda: proxies.insert_unary(
                project=self.project,
                target_http_proxy_resource=compute_v1.TargetHttpProxy(
                    name=proxy, url_map=self._global(f"urlMaps/{url_map}")
                ),
            ),
            f"created target HTTP proxy {proxy}",
        )
        self._record(config, ctx, "http_proxy", proxy)
        rules = self.client(compute_v1.GlobalForwardingRulesClient)
        rule = ctx.resource_name("fr")
        self._ensure(
            ctx,
            lambda: rules.insert_unary(
                project=self.project,
                forwarding_rule_resource=compute_v1.ForwardingRule(
                    name=rule, I_p_address=config.resources["load_balancer_dns"],
                    I_p_protocol="TCP", port_range=str(LISTENER_PORT),
                    target=self._global(f"targetHttpProxies/{proxy}"),
                    load_balancing_scheme=SCHEME, labels=self._labels(ctx, "listener"),
                ),
            ),
            f"created forwarding rule {rule} on port {LISTENER_PORT}",
        )  # fmt: skip
        self._record(config, ctx, "listener", rule)
        return (
            f"HTTP :{LISTENER_PORT} on {config.resources['load_balancer_dns']} → backend service."
        )

    # ---- after provisioning -----------------------------------------------------------------
    @mapped
    def update_health_check(self, config: InfraConfig, ctx: StepContext) -> str:
        """The health check moves to the config's path and port, which the firewall rule then
        lets Google's checkers reach (with the traffic port, which stays as it was)."""
        checks = self.client(compute_v1.HealthChecksClient)
        name = config.resources.get("health_check") or ctx.resource_name("hc")
        if not_found(lambda: checks.get(project=self.project, health_check=name)) is None:
            raise CloudError("The job's health check is gone: detach and attach the load balancer.")
        self._allow_from_lb(config, ctx)
        self._done(
            ctx,
            checks.patch_unary(
                project=self.project, health_check=name,
                health_check_resource=compute_v1.HealthCheck(
                    type_="HTTP", http_health_check=self._health_check(config)
                ),
            ),
        )  # fmt: skip
        return f"Health check is now GET {config.health_check_path} on {config.health_check_port}."

    @mapped
    def detach_load_balancer(self, config: InfraConfig, ctx: StepContext) -> str:
        """Everything the LB steps made, in reverse; the VMs are not touched."""
        removed = []
        address = config.resources.get("load_balancer_dns", "")
        if config.dns_name and (zone := self._managed_zone(config, ctx, create=False)):
            # Only the record pointing at the job's own address: a record someone else made for
            # the name stays.
            records = [r for r in self._a_records(zone, config) if r.get("rrdatas") == [address]]
            if records and address:
                self._dns("POST", f"managedZones/{zone}/changes", json={"deletions": records})
                removed.append("DNS record")
            if config.resources.get("hosted_zone_created") == zone:
                try:
                    self._dns("DELETE", f"managedZones/{zone}")
                except CloudError as error:
                    if error.code != "containerNotEmpty":
                        raise
                    ctx.log(f"kept the DNS zone {zone}: it holds records the job did not make")
                else:
                    removed.append("DNS zone")
                config.resources.pop("hosted_zone_created", None)
                ctx.save()
        zones = self._zone_list(config)
        steps: list[tuple[str, type, dict[str, str]]] = [
            ("forwarding rule", compute_v1.GlobalForwardingRulesClient,
             {"forwarding_rule": ctx.resource_name("fr")}),
            ("target proxy", compute_v1.TargetHttpProxiesClient,
             {"target_http_proxy": ctx.resource_name("proxy")}),
            ("URL map", compute_v1.UrlMapsClient, {"url_map": ctx.resource_name("urlmap")}),
            ("backend service", compute_v1.BackendServicesClient,
             {"backend_service": ctx.resource_name("bes")}),
            *[("instance group", compute_v1.InstanceGroupsClient,
               {"zone": zone, "instance_group": self._zone_group_name(ctx, zone)})
              for zone in zones],
            ("health check", compute_v1.HealthChecksClient,
             {"health_check": ctx.resource_name("hc")}),
            ("address", compute_v1.GlobalAddressesClient, {"address": ctx.resource_name("lb-ip")}),
            ("firewall rule", compute_v1.FirewallsClient, {"firewall": ctx.resource_name("lb-in")}),
        ]  # fmt: skip
        for what, client_class, where in steps:
            delete = partial(self.client(client_class).delete_unary, project=self.project, **where)
            if self._delete(ctx, delete) and what not in removed:
                removed.append(what)
        for kind in LB_RESOURCES:
            config.resources.pop(kind, None)
        ctx.save()
        return f"Removed: {', '.join(removed)}." if removed else "No load balancer was attached."

    def backend_health(self, config: InfraConfig) -> dict[str, tuple[str, str]]:
        """What the load balancer says of each VM: name → (healthy | unhealthy, why)."""
        service = config.resources.get("target_group")
        if not service:
            return {}
        services = self.client(compute_v1.BackendServicesClient)
        found = services.get(project=self.project, backend_service=service)
        health = {}
        check = f"GET {config.health_check_path} on port {config.health_check_port}"
        for backend in found.backends:
            answer = services.get_health(
                project=self.project, backend_service=service,
                resource_group_reference_resource=compute_v1.ResourceGroupReference(
                    group=backend.group
                ),
            )  # fmt: skip
            for status in answer.health_status:
                state = status.health_state.lower()
                reason = "" if state == "healthy" else f"the health check {check} fails"
                health[short(status.instance)] = (state, reason)
        return health
