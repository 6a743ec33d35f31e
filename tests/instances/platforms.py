"""Where the behaviour tests run an instance: this console's QEMU hosts or a KubeVirt cluster
(the fake, whose VMIs are real QEMU guests). Tests act through the console and look at the real
guest through `guest`, wherever it runs."""

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from instances.backends import backend_named
from instances.backends.qemu.backend import QemuBackend
from instances.models import Instance
from tests import factories
from tests.factories import SubnetFactory
from tests.fakes.kubevirt.fixtures import guest_of

PLATFORMS = ["qemu", "kubevirt"]


@dataclass(frozen=True)
class Platform:
    """An instance's home in a test: the cluster it names ("" for this console's hosts), the zone
    its subnet lies in, and where its guest runs (a QEMU backend and the machine's id there)."""

    name: str
    cluster: str
    zone: str
    guest: Callable[[Instance], tuple[QemuBackend, str]]
    log_spans_runs: bool = True  # KubeVirt: each run (VMI) is a new launcher with its own log

    def runs_in_log(self, runs: int) -> int:
        """How many boots of `runs` the guest's serial log holds."""
        return runs if self.log_spans_runs else 1

    def make(self, operator, image, subnet, name: str, ip: str, **fields) -> Instance:
        where = {"cluster": self.cluster} if self.cluster else {}
        return factories.demo_instance(
            actor=operator, image=image, subnet=subnet, name=name, ip=ip, **where, **fields
        )

    def lan(self, project, cidr: str = "10.88.0"):
        return SubnetFactory(project=project, name="lan", zone=self.zone, cidr_v4=f"{cidr}.0/24",
                             gateway=f"{cidr}.1", dns_resolvers="")  # fmt: skip


def platform_for(request: pytest.FixtureRequest) -> Platform:
    """The platform named by the test's parameter, with the fixtures it needs running: a Celery
    worker for both; for KubeVirt the fake cluster, added to the console and watched."""
    request.getfixturevalue("celery_worker_process")
    if request.param == "qemu":
        backend = backend_named("qemu")
        assert isinstance(backend, QemuBackend)
        return Platform("qemu", "", "local-1a", lambda vm: (backend, vm.machine_id))
    kubevirt = request.getfixturevalue("kubevirt")
    request.getfixturevalue("cluster")
    request.getfixturevalue("watching")
    return Platform("kubevirt", "lab", "zone-a", lambda vm: guest_of(kubevirt, vm), False)
