"""The host's reconcile tick and guest-report round at 100, 1,000 and 10,000 instances.

Each size is a host of its own in one fresh SQLite database (so every host shares the table with
the others), its instances on an offline stand-in backend that answers status reads and guest
facts from memory, as the reconciler tests' stand-ins do: what is timed is the console's own
work (the queries and the Python around them), not a hypervisor's. Three in four instances run,
with a NIC whose link is up and a guest report saying what the guest says now.

For each size, median of N runs after a warm-up, with SQL queries counted on one more run:
- nothing changed: a reconcile tick (services.reconciler.reconcile_host), and a guest-report
  round (services.guest_reports.guest_reports_host, every running guest due to be asked);
- a few changed: CHANGES guests powered off by themselves or were found running, and CHANGES
  guests report a new address; each run checks that the console recorded every change.

    python benchmarks/scale.py [--sizes 100,1000,10000] [--runs 5]
"""

import argparse
import shutil
import statistics
import time
from collections.abc import Callable
from datetime import timedelta

from stack import WORK

# isort: split
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from instances import backends
from instances.backends.base import (
    BackendError,
    ExitKind,
    GuestFacts,
    GuestInterface,
    MachineStatus,
    Power,
)
from instances.choices import CarrierState, PowerState, RunStrategy
from instances.models import GuestReport, Instance, NetworkInterface, Project, Subnet
from instances.services import guest_reports, reconciler
from instances.services.guest_reports import _kept

CHANGES = 5  # instances that changed in a run of the "a few changed" case
RUNNING = Power.RUNNING
OFF = MachineStatus(Power.STOPPED, ExitKind.REQUESTED)
NEVER_STARTED = MachineStatus(Power.STOPPED)


class OfflineBackend:
    """The hypervisor of every benchmark host, in memory: a status read or a guest agent's
    answer is a dictionary lookup."""

    name = "offline"

    def __init__(self) -> None:
        self.machines: dict[str, MachineStatus] = {}
        self.facts: dict[str, GuestFacts] = {}

    def status(self, machine_id: str) -> MachineStatus:
        return self.machines.get(machine_id, NEVER_STARTED)

    def guest_facts(self, machine_id: str) -> GuestFacts:
        if self.status(machine_id).power != RUNNING:
            raise BackendError(f"Machine {machine_id} is not running.")
        return self.facts[machine_id]

    def set_link(self, machine_id: str, nic_name: str, up: bool) -> bool:
        return True

    def force_stop(self, machine_id: str) -> None:
        self.machines[machine_id] = OFF


def running_status() -> MachineStatus:
    return MachineStatus(Power.RUNNING, pid=1, links={"eth0": True})


def facts_of(pk: int, version: int = 0) -> GuestFacts:
    mac = mac_of(pk)
    address = f"10.{version % 200}.{pk // 250 % 250}.{pk % 250 + 2}/16"
    interface = GuestInterface(name="eth0", mac=mac, addresses=(address,), carrier=True)
    return GuestFacts(
        hostname=f"vm-{pk}", os="Debian GNU/Linux 12 (bookworm)", interfaces=(interface,),
        memory_total_kb=1_000_000, memory_available_kb=750_000,
        filesystems=({"mountpoint": "/", "type": "ext4", "device": "vda1",
                      "total_bytes": 10 * 1024**3, "used_bytes": 2 * 1024**3},),
    )  # fmt: skip


def mac_of(pk: int) -> str:
    return "52:54:00:" + ":".join(f"{(pk >> s) & 255:02x}" for s in (16, 8, 0))


def seed(backend: OfflineBackend, size: int) -> str:
    """Host h<size>: `size` instances, three in four running, each with eth0 and (running) a
    guest report of what its guest says now. Returns the host's name."""
    host = f"h{size}"
    project = Project.objects.create(slug=host, name=host)
    subnet = Subnet.objects.create(
        project=project, name="net", zone="local-1a", cidr_v4="10.0.0.0/16", gateway="10.0.0.1"
    )
    states = [PowerState.RUNNING, PowerState.RUNNING, PowerState.STOPPED, PowerState.RUNNING]
    instances = Instance.objects.bulk_create(
        Instance(project=project, name=f"vm-{n:05d}", zone="local-1a", host=host,
                 backend=backend.name, run_strategy=RunStrategy.MANUAL, initial_password="x",
                 power_state=states[n % 4])
        for n in range(size)
    )  # fmt: skip
    long_ago = timezone.now() - timedelta(hours=1)
    Instance.objects.filter(host=host).update(state_changed_at=long_ago)
    NetworkInterface.objects.bulk_create(
        NetworkInterface(instance=i, subnet=subnet, index=0, mac=mac_of(i.pk),
                         carrier=CarrierState.UP if i.power_state == PowerState.RUNNING
                         else CarrierState.STOPPED)
        for i in instances
    )  # fmt: skip
    running = [i for i in instances if i.power_state == PowerState.RUNNING]
    for instance in instances:
        on = instance.power_state == PowerState.RUNNING
        backend.machines[instance.machine_id] = running_status() if on else OFF
        backend.facts[instance.machine_id] = facts_of(instance.pk)
    now = timezone.now()
    GuestReport.objects.bulk_create(
        GuestReport(instance=i, reported_at=now, asked_at=now,
                    **_kept(backend.facts[i.machine_id]))
        for i in running
    )  # fmt: skip
    return host


def all_due(host: str) -> None:
    """Every running guest of the host due to be asked again (as after a round's interval)."""
    long_ago = timezone.now() - timedelta(hours=1)
    GuestReport.objects.filter(instance__host=host).update(asked_at=long_ago)


def timed(work: Callable[[], None], before: Callable[[], None], runs: int) -> tuple[float, int]:
    """Median milliseconds of `work` over `runs` after a warm-up, and its queries on one more
    run; `before` runs untimed ahead of each."""
    times = []
    for _ in range(runs + 1):
        before()
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    before()
    return statistics.median(times[1:]), queries_of(work)


def queries_of(work: Callable[[], None]) -> int:
    counted = 0

    def count(execute, *query):  # type: ignore[no-untyped-def]
        nonlocal counted
        counted += 1
        return execute(*query)

    with connection.execute_wrapper(count):
        work()
    return counted


class Changes:
    """The few changes of a run: guests that powered off by themselves or were found running
    (taken in turns from the host's instances), and guests that report a new address."""

    def __init__(self, backend: OfflineBackend, host: str) -> None:
        self.backend = backend
        pks = Instance.objects.filter(host=host).order_by("pk").values_list("pk", flat=True)
        self.pks = list(pks)
        self.turn = 0
        self.flipped: dict[int, str] = {}
        self.reported: dict[int, str] = {}

    def power(self) -> None:
        """Flip CHANGES machines' power behind the console's back."""
        self.flipped = {}
        for _ in range(CHANGES):
            pk = self.pks[self.turn % len(self.pks)]
            self.turn += 997  # spread over the host, coprime with the sizes
            machine_id = f"i-{pk}"
            if self.backend.machines[machine_id].power == RUNNING:
                self.backend.machines[machine_id] = MachineStatus(
                    Power.STOPPED, ExitKind.GUEST_POWEROFF
                )
                self.flipped[pk] = PowerState.STOPPED
            else:
                self.backend.machines[machine_id] = running_status()
                self.flipped[pk] = PowerState.RUNNING

    def facts(self) -> None:
        """CHANGES running guests now report another address; all guests due."""
        self.reported = {}
        running = [pk for pk in self.pks if self.backend.machines[f"i-{pk}"].power == RUNNING]
        for _ in range(CHANGES):
            pk = running[self.turn % len(running)]
            self.turn += 997
            facts = facts_of(pk, self.turn)
            self.backend.facts[f"i-{pk}"] = facts
            self.reported[pk] = facts.interfaces[0].addresses[0]

    def check_power(self) -> None:
        states = dict(Instance.objects.filter(pk__in=self.flipped).values_list("pk", "power_state"))
        assert states == self.flipped, ("a change was missed", states, self.flipped)

    def check_facts(self) -> None:
        for pk, address in self.reported.items():
            interfaces = GuestReport.objects.get(instance_id=pk).interfaces
            assert interfaces[0]["addresses"] == [address], ("a report was missed", pk)


def measure(backend: OfflineBackend, host: str, runs: int) -> dict[str, tuple[float, int]]:
    changes = Changes(backend, host)

    def tick_changed() -> None:
        reconciler.reconcile_host(host)
        changes.check_power()

    def round_changed() -> None:
        guest_reports.guest_reports_host(host)
        changes.check_facts()

    def facts_changed() -> None:
        changes.facts()
        all_due(host)

    return {
        "reconcile_tick": timed(lambda: reconciler.reconcile_host(host), lambda: None, runs),
        "reconcile_tick_changed": timed(tick_changed, changes.power, runs),
        "guest_report_round": timed(
            lambda: guest_reports.guest_reports_host(host), lambda: all_due(host), runs
        ),
        "guest_report_round_changed": timed(round_changed, facts_changed, runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    call_command("migrate", verbosity=0)
    backend = OfflineBackend()
    backends.register_backend(backend.name, lambda: backend)
    local = frozenset({backend.name})  # the stand-in is this host's hypervisor
    reconciler.LOCAL_BACKENDS = local  # type: ignore[misc]
    guest_reports.LOCAL_BACKENDS = local  # type: ignore[misc]
    get_user_model().objects.create_user("bench")

    hosts = {}
    for size in sizes:
        started = time.perf_counter()
        hosts[size] = seed(backend, size)
        took = time.perf_counter() - started
        print(f"seeded host {hosts[size]}: {size} instances ({took:.1f} s)")
    results = {}
    for size in sizes:
        started = time.perf_counter()
        results[size] = measure(backend, hosts[size], args.runs)
        print(f"measured {size} instances ({time.perf_counter() - started:.1f} s)")

    names = list(results[sizes[0]])
    print(f"\n{'median ms (queries)':<28}" + "".join(f"{size:>18,}" for size in sizes))
    for name in names:
        cells = "".join(
            f"{results[size][name][0]:>11.2f} ({results[size][name][1]:>4})" for size in sizes
        )
        print(f"{name:<28}{cells}")
    print()
    for name in ("reconcile_tick", "guest_report_round"):
        if 100 in results and 10000 in results:
            ratio = results[10000][name][0] / results[100][name][0]
            print(f"figure: {name}_10k_vs_100 = {ratio:.2f} x")
    for name in names:
        for size in sizes:
            print(f"figure: {name}_ms_{size} = {results[size][name][0]:.2f} ms")
    for name in names:
        for size in sizes:
            print(f"figure: {name}_queries_{size} = {results[size][name][1]} queries")
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
