"""Live migration of a running machine from one QEMU backend to another on this host.

The target launches the machine's QEMU waiting for its state (`-incoming defer`) and listens on
a socket in its run folder (`migrate-incoming`); the source sends memory and device state over
it (`migrate`) while the guest runs; `query-migrate` tells how far it got. The two backends
share their disk folder, so no block migration is needed (as a cluster's shared storage).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass

from instances.backends.base import BackendError, ExitKind, MachineSpec

from .run_folder import RunFolder
from .runs import QemuRuns

MIGRATION_SOCKET = "mig.sock"
POLL_SECONDS = 0.2


@dataclass(frozen=True)
class MigrationProgress:
    """QEMU's query-migrate, on the source: its status ("setup", "active", "device",
    "completed", "failed", "cancelled"...), the RAM sent and left, and why it failed."""

    status: str
    transferred: int = 0
    total: int = 0
    remaining: int = 0
    error: str = ""

    @property
    def finished(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")

    @property
    def percent(self) -> int:
        if self.status == "completed":
            return 100
        return int(100 * (self.total - self.remaining) / self.total) if self.total else 0


class QemuMigration(QemuRuns):
    """The migration half of the QEMU backend: the source and the target are two backends."""

    def start(self, spec: MachineSpec, *, incoming: bool = False) -> bool:
        raise NotImplementedError  # the backend's own (backend.py)

    def migration_receive(self, spec: MachineSpec) -> str:
        """On the target: launch the machine waiting for its state and listen for it; the
        address the source sends to."""
        run = self._run_folder(spec.id)
        if not self.start(spec, incoming=True):
            raise BackendError(f"Machine {spec.id} runs already on the target.")
        address = f"unix:{run.path / MIGRATION_SOCKET}"
        try:
            self._monitor(run).execute("migrate-incoming", {"uri": address})
        except BackendError:
            self.migration_abandon(spec.id)
            raise
        return address

    def migration_send(self, machine_id: str, address: str) -> None:
        """On the source: start sending the running machine to `address`; returns at once."""
        run = self._run_folder(machine_id)
        with run.lock():
            self._require_running(run)
            self._monitor(run).execute("migrate", {"uri": address})

    def migration_progress(self, machine_id: str) -> MigrationProgress:
        """On the source: how far its migration got."""
        answer = self._monitor(self._run_folder(machine_id)).execute("query-migrate")
        ram = answer.get("ram", {})
        return MigrationProgress(
            status=answer.get("status", "none"),
            transferred=int(ram.get("transferred", 0)),
            total=int(ram.get("total", 0)),
            remaining=int(ram.get("remaining", 0)),
            error=answer.get("error-desc", ""),
        )

    def migration_cancel(self, machine_id: str) -> None:
        """On the source: call a migration under way off; the guest runs on here."""
        self._monitor(self._run_folder(machine_id)).execute("migrate_cancel")

    def migration_hand_over(self, machine_id: str) -> None:
        """On the source, once completed: end its QEMU (paused, in postmigrate), as the
        target runs the guest now."""
        self._end_migrated(self._run_folder(machine_id))

    def migration_abandon(self, machine_id: str) -> None:
        """On the target, after a migration failed or was cancelled: end the QEMU that waited
        for the state (the guest runs on at the source)."""
        self._end_migrated(self._run_folder(machine_id))

    def _end_migrated(self, run: RunFolder) -> None:
        with run.lock():
            pid = self._live_pid(run)
            if pid is None:
                return
            run.mark_stop_requested()
            self._end_run(run, pid, ExitKind.REQUESTED)

    def migrate_to(
        self,
        target: "QemuMigration",
        spec: MachineSpec,
        *,
        timeout: float,
        on_progress: Callable[[MigrationProgress], None] = lambda progress: None,
    ) -> MigrationProgress:
        """Move the running machine to `target`, start to end: on success the target runs it
        and this backend's QEMU is ended; otherwise it runs on here. The last progress read."""
        address = target.migration_receive(spec)
        try:
            self.migration_send(spec.id, address)
            deadline = time.monotonic() + timeout
            while not (progress := self.migration_progress(spec.id)).finished:
                on_progress(progress)
                if time.monotonic() > deadline:
                    self.migration_cancel(spec.id)
                    raise BackendError(
                        f"The migration of {spec.id} did not finish within {timeout:g} s."
                    )
                time.sleep(POLL_SECONDS)
        except BaseException:
            target.migration_abandon(spec.id)
            raise
        on_progress(progress)
        if progress.status != "completed":
            target.migration_abandon(spec.id)
            return progress
        self.migration_hand_over(spec.id)
        return progress
