"""InfraConfig: everything a job knows, serialised into its `config` JSON.

It holds the wizard's choices, the id of every resource the steps created, and the per-VM
lifecycle state. Adding a field is a dataclass change, not a migration; unknown keys in stored
JSON are ignored and missing ones take their defaults, so old jobs still load.
"""

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from provisioning.choices import BootstrapMode, NetworkMode, PoolMode

SENTINEL_PATH = "/var/lib/zopday/bootstrap-complete"


@dataclass
class VmRecord:
    """One VM of the pool and where it is in its lifecycle (choices.VmState)."""

    instance_id: str
    state: str = "launching"
    private_ip: str = ""
    zone: str = ""
    ready_at: str = ""
    console_instance_id: int | None = None
    # The load balancer's view of it (healthy, unhealthy, unused, draining...), and why.
    lb_health: str = ""
    lb_health_reason: str = ""


@dataclass
class InfraConfig:
    # The wizard's choices.
    provider: str = "aws"
    region: str = "us-east-1"
    pool_mode: str = PoolMode.FIXED
    instance_count: int = 1
    asg_min: int = 1
    asg_max: int = 1
    asg_desired: int = 1
    instance_type: str = "t3.micro"
    disk_gb: int = 20
    image_id: str = ""
    network_mode: str = NetworkMode.NEW
    vpc_cidr: str = "10.42.0.0/16"
    existing_vpc_id: str = ""
    existing_subnet_id: str = ""
    bootstrap_mode: str = BootstrapMode.DEFAULT
    load_balancer: bool = False
    health_check_path: str = "/healthz"
    health_check_port: int = 80
    # The port the VMs serve on, once the health check has been moved off it (0: the same).
    service_port: int = 0
    dns_name: str = ""
    exec_mode: str = "SSM"
    # A ZopNight stop schedule for a Fixed pool ("" = runs 24×7; provisioning.schedules), in
    # the time zone schedule_tz; schedule_applied is what it last did: "on", "off" or "".
    schedule: str = ""
    schedule_tz: str = "UTC"
    schedule_applied: str = ""
    # What the steps made: resource kind → id (vpc, private_subnet, nat_gateway, ...).
    resources: dict[str, str] = field(default_factory=dict)
    created_network: bool = False
    vms: list[VmRecord] = field(default_factory=list)
    # What stepRegisterSpace recorded in the console.
    space: dict[str, Any] = field(default_factory=dict)

    @property
    def vm_count(self) -> int:
        return self.instance_count if self.pool_mode == PoolMode.FIXED else self.asg_desired

    @property
    def traffic_port(self) -> int:
        """Where the load balancer sends requests: the bootstrap publishes the service on the
        health check's port, and a later change of the check leaves it there."""
        return self.service_port or self.health_check_port

    @property
    def sentinel_path(self) -> str:
        return SENTINEL_PATH

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> "InfraConfig":
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        vm_fields = {f.name for f in fields(VmRecord)}
        values["vms"] = [
            VmRecord(**{k: v for k, v in vm.items() if k in vm_fields})
            for vm in values.get("vms", [])
        ]
        return cls(**values)
