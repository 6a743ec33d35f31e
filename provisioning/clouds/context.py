"""What a cloud's step call gets besides the config: the job's names, tags, log and heartbeat."""

import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings

from provisioning.choices import VmState
from provisioning.clouds.errors import CloudError
from provisioning.infra import InfraConfig, VmRecord


def poll_delays(longest: float, first: float = 0.05) -> Iterator[float]:
    """The sleeps between polls: from `first`, doubling up to `longest`, so a cloud that answers
    quickly is not waited on for a whole period while a slow one is not asked more often."""
    delay = min(first, longest)
    while True:
        yield delay
        delay = min(delay * 2, longest)


@dataclass
class StepContext:
    """The job's names and tags, a log, and a heartbeat to call while waiting (it renews the
    step's lease). `first_attempt`: no earlier attempt of the step ran, so a cloud may create
    without looking its resources up first."""

    job_id: int
    token: str
    name: str
    tags: dict[str, str]
    step_id: int = 0  # the running step: unique to this run of it, the same for its retries
    log: Callable[[str], None] = field(default=lambda line: None)
    heartbeat: Callable[[], None] = field(default=lambda: None)
    save: Callable[[], None] = field(default=lambda: None)
    first_attempt: bool = False

    def resource_name(self, suffix: str) -> str:
        """A deterministic cloud-side name: zopday-<name>-<token>-<suffix>."""
        return f"zopday-{self.name}-{self.token}-{suffix}"

    def wait(self, what: str, done: Callable[[], bool], timeout: float) -> None:
        """Poll `done` until it is true, renewing the step's lease; CloudError after timeout."""
        deadline = time.monotonic() + timeout
        delays = poll_delays(min(settings.ZOPDAY_PROVISIONING_POLL_SECONDS, 2.0))
        while not done():
            if time.monotonic() > deadline:
                raise CloudError(f"Timed out after {int(timeout)} s waiting for {what}.")
            self.heartbeat()
            time.sleep(next(delays))


def wait_for_sentinels(
    config: InfraConfig,
    ctx: StepContext,
    *,
    running: Callable[[list[VmRecord]], Collection[str]],
    present: Callable[[VmRecord], bool],
    shell: str,
    present_first: bool = False,
) -> None:
    """stepCreateVMs' readiness wait, the same on every cloud: a running VM (`running` answers
    their ids) is bootstrapping until `present` finds its sentinel; past the timeout, a
    CloudError says how to look (`shell`: how to open one on that cloud). With `present_first`
    (`present` answers False for a VM not running yet), the sentinel is asked first and `running`
    only about the VMs without one: a ready VM costs one call, not two."""
    timeout = settings.ZOPDAY_PROVISIONING_READY_TIMEOUT
    deadline = time.monotonic() + timeout
    delays = poll_delays(settings.ZOPDAY_PROVISIONING_POLL_SECONDS, first=0.25)

    def ready(vm: VmRecord) -> None:
        vm.state = VmState.READY
        vm.ready_at = datetime.now(UTC).isoformat()
        ctx.log(f"{vm.instance_id}: sentinel {config.sentinel_path} present")

    while pending := [vm for vm in config.vms if vm.state != VmState.READY]:
        if present_first:
            for vm in pending:
                if present(vm):
                    ready(vm)
            pending = [vm for vm in pending if vm.state != VmState.READY]
        up = running(pending) if pending else set()
        for vm in pending:
            if vm.instance_id not in up:
                continue
            vm.state = VmState.BOOTSTRAPPING
            if not present_first and present(vm):
                ready(vm)
        ctx.save()
        if all(vm.state == VmState.READY for vm in config.vms):
            return
        if time.monotonic() > deadline:
            waiting = ", ".join(vm.instance_id for vm in config.vms if vm.state != VmState.READY)
            raise CloudError(
                f"Timed out after {timeout} s waiting for the bootstrap sentinel "
                f"{config.sentinel_path} on {waiting}. cloud-init may still be installing Docker "
                f"or may have failed: {shell} and read /var/log/cloud-init-output.log."
            )
        ctx.heartbeat()
        time.sleep(next(delays))
