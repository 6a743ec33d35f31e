"""Stand-in backends for the worker's and the reconciler's logic, where a real QEMU cannot
show the case at will (a Force Shutdown landing during a launch, a status read failing)."""

from instances.backends.base import MachineStatus, Power
from instances.models import Instance


class LaunchingBackend:
    """Launches; `meanwhile` runs during the launch, as another worker thread would."""

    name = "launching"

    def __init__(self, meanwhile) -> None:  # type: ignore[no-untyped-def]
        self.meanwhile = meanwhile
        self.running = False
        self.force_stops = 0
        self.links: list[tuple[str, bool]] = []  # set_link's calls: NIC name, up

    def status(self, machine_id: str) -> MachineStatus:
        return MachineStatus(Power.RUNNING if self.running else Power.STOPPED)

    def start(self, spec) -> bool:  # type: ignore[no-untyped-def]
        self.meanwhile()
        if self.running:  # another start launched it meanwhile
            return False
        self.running = True
        return True

    def force_stop(self, machine_id: str) -> None:
        self.force_stops += 1
        self.running = False

    def set_link(self, machine_id: str, nic_name: str, up: bool) -> bool:
        self.links.append((nic_name, up))
        return True


def claim_of(instance: Instance) -> str:
    """The claim a user's Start sends with the task (services.power)."""
    return instance.state_changed_at.isoformat()
