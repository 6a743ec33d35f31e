"""Bundled price tables (USD on-demand list prices, Linux: AWS us-east-1, GCP us-central1) and
the seed's formula:

    VM cost = instance hourly × count × hours + storage + LB hourly (if attached) + NAT

Other regions use the same tables: it is an estimate shown before provisioning, not a bill.
"""

from dataclasses import dataclass

from provisioning.choices import Provider

HOURS_PER_MONTH = 730
# A weeknight/weekend stop schedule: on 12 hours a day, 5 days a week.
SCHEDULED_HOURS_PER_MONTH = 12 * 5 * 52 / 12


@dataclass(frozen=True)
class MachineType:
    hourly: float
    vcpus: int
    memory_gb: int


@dataclass(frozen=True)
class CloudPrices:
    machines: dict[str, MachineType]
    default_machine: str
    disk_gb_month: float  # EBS gp3 / pd-balanced
    lb_hourly: float  # ALB / a forwarding rule
    nat_hourly_base: float  # a NAT gateway's own hour (AWS)
    nat_hourly_per_vm: float  # Cloud NAT bills per VM hour (GCP)
    nat_gb_processed: float
    # How the review's cost table names each line.
    disk_label: str
    lb_label: str
    nat_label: str


PRICES: dict[str, CloudPrices] = {
    Provider.AWS: CloudPrices(
        machines={
            "t3.micro": MachineType(0.0104, 2, 1),
            "t3.small": MachineType(0.0208, 2, 2),
            "t3.medium": MachineType(0.0416, 2, 4),
            "t3.large": MachineType(0.0832, 2, 8),
            "m6i.large": MachineType(0.096, 2, 8),
            "m6i.xlarge": MachineType(0.192, 4, 16),
            "c6i.large": MachineType(0.085, 2, 4),
            "r6i.large": MachineType(0.126, 2, 16),
        },
        default_machine="t3.micro",
        disk_gb_month=0.08,
        lb_hourly=0.0225,
        nat_hourly_base=0.045,
        nat_hourly_per_vm=0.0,
        nat_gb_processed=0.045,
        disk_label="EBS gp3",
        lb_label="Application Load Balancer",
        nat_label="NAT gateway (hours + data processing)",
    ),
    Provider.GCP: CloudPrices(
        machines={
            "e2-micro": MachineType(0.0084, 2, 1),
            "e2-small": MachineType(0.0168, 2, 2),
            "e2-medium": MachineType(0.0335, 2, 4),
            "e2-standard-2": MachineType(0.0670, 2, 8),
            "e2-standard-4": MachineType(0.1340, 4, 16),
            "n2-standard-2": MachineType(0.0971, 2, 8),
            "n2-standard-4": MachineType(0.1942, 4, 16),
            "c3-standard-4": MachineType(0.2014, 4, 16),
        },
        default_machine="e2-small",
        disk_gb_month=0.10,
        lb_hourly=0.025,
        nat_hourly_base=0.0,
        nat_hourly_per_vm=0.0014,
        nat_gb_processed=0.045,
        disk_label="pd-balanced",
        lb_label="forwarding rule of the load balancer",
        nat_label="Cloud NAT (per VM hour + data processing)",
    ),
}
# The NAT data processing the estimate assumes per VM and month (package updates, images).
NAT_GB_PER_VM_MONTH = 10


def prices_for(provider: str) -> CloudPrices:
    """The cloud's table (AWS's for a provider without one)."""
    return PRICES.get(provider, PRICES[Provider.AWS])


def machine_size(provider: str, instance_type: str) -> tuple[int, int]:
    """(vCPU, memory GB) of a machine type, for the console's instance rows."""
    machine = prices_for(provider).machines.get(instance_type)
    return (machine.vcpus, machine.memory_gb) if machine else (1, 1)


@dataclass(frozen=True)
class CostEstimate:
    instances: float
    storage: float
    load_balancer: float
    nat: float
    scheduled_instances: float

    @property
    def monthly(self) -> float:
        return self.instances + self.storage + self.load_balancer + self.nat

    @property
    def scheduled_monthly(self) -> float:
        return self.scheduled_instances + self.storage + self.load_balancer + self.nat

    @property
    def savings(self) -> float:
        return self.monthly - self.scheduled_monthly

    @property
    def savings_percent(self) -> float:
        return 100 * self.savings / self.monthly if self.monthly else 0.0


def estimate(
    *,
    instance_type: str,
    count: int,
    disk_gb: int,
    load_balancer: bool,
    nat: bool,
    provider: str = Provider.AWS,
) -> CostEstimate:
    prices = prices_for(provider)
    machine = prices.machines.get(instance_type)
    hourly = machine.hourly if machine else 0.0
    nat_cost = (
        (prices.nat_hourly_base + prices.nat_hourly_per_vm * count) * HOURS_PER_MONTH
        + prices.nat_gb_processed * NAT_GB_PER_VM_MONTH * count
        if nat
        else 0.0
    )
    return CostEstimate(
        instances=round(hourly * count * HOURS_PER_MONTH, 2),
        storage=round(prices.disk_gb_month * disk_gb * count, 2),
        load_balancer=round(prices.lb_hourly * HOURS_PER_MONTH, 2) if load_balancer else 0.0,
        nat=round(nat_cost, 2),
        scheduled_instances=round(hourly * count * SCHEDULED_HOURS_PER_MONTH, 2),
    )
