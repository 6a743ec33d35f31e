"""A bundled price table (USD, us-east-1 on-demand list prices, Linux) and the seed's formula:

    VM cost = instance hourly × count × hours + storage + LB hourly (if attached) + NAT

Other regions use the same table: it is an estimate shown before provisioning, not a bill.
"""

from dataclasses import dataclass

HOURS_PER_MONTH = 730
# A weeknight/weekend stop schedule: on 12 hours a day, 5 days a week.
SCHEDULED_HOURS_PER_MONTH = 12 * 5 * 52 / 12

INSTANCE_HOURLY = {
    "t3.micro": 0.0104,
    "t3.small": 0.0208,
    "t3.medium": 0.0416,
    "t3.large": 0.0832,
    "m6i.large": 0.096,
    "m6i.xlarge": 0.192,
    "c6i.large": 0.085,
    "r6i.large": 0.126,
}
EBS_GP3_GB_MONTH = 0.08
ALB_HOURLY = 0.0225
NAT_HOURLY = 0.045
NAT_GB_PROCESSED = 0.045
# The NAT data processing the estimate assumes per VM and month (package updates, images).
NAT_GB_PER_VM_MONTH = 10


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
    *, instance_type: str, count: int, disk_gb: int, load_balancer: bool, nat: bool
) -> CostEstimate:
    hourly = INSTANCE_HOURLY.get(instance_type, 0.0)
    nat_cost = (
        (NAT_HOURLY * HOURS_PER_MONTH + NAT_GB_PROCESSED * NAT_GB_PER_VM_MONTH * count)
        if nat
        else 0.0
    )
    return CostEstimate(
        instances=round(hourly * count * HOURS_PER_MONTH, 2),
        storage=round(EBS_GP3_GB_MONTH * disk_gb * count, 2),
        load_balancer=round(ALB_HOURLY * HOURS_PER_MONTH, 2) if load_balancer else 0.0,
        nat=round(nat_cost, 2),
        scheduled_instances=round(hourly * count * SCHEDULED_HOURS_PER_MONTH, 2),
    )


# vCPU and memory (GB) of each instance type, for the console's instance rows.
INSTANCE_SIZES = {
    "t3.micro": (2, 1),
    "t3.small": (2, 2),
    "t3.medium": (2, 4),
    "t3.large": (2, 8),
    "m6i.large": (2, 8),
    "m6i.xlarge": (4, 16),
    "c6i.large": (2, 4),
    "r6i.large": (2, 16),
}
