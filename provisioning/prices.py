"""The seed's cost formula over each cloud's bundled price table (`Cloud.prices`):

    VM cost = instance hourly × count × hours + storage + LB hourly (if attached) + NAT

Other regions use the same tables: it is an estimate shown before provisioning, not a bill.
"""

from dataclasses import dataclass

from provisioning.clouds import DEFAULT, cloud_for
from provisioning.clouds.base import CloudPrices

HOURS_PER_MONTH = 730
# A weeknight/weekend stop schedule: on 12 hours a day, 5 days a week.
SCHEDULED_HOURS_PER_MONTH = 12 * 5 * 52 / 12


# The NAT data processing the estimate assumes per VM and month (package updates, images).
NAT_GB_PER_VM_MONTH = 10


def prices_for(provider: str) -> CloudPrices:
    return cloud_for(provider).prices


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
    provider: str = DEFAULT.name,
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
