"""The one protocol every cloud provider implements, and the one error type it raises.

Steps call these methods; each is idempotent: it finds what an earlier attempt made (by the
job's tag or a deterministic name) before creating anything, and records ids in the InfraConfig.
Cloud SDK imports stay inside the provider modules.
"""

import time
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import wraps
from typing import Any, Protocol, TypeVar

from django.conf import settings

from provisioning.choices import VmState
from provisioning.infra import InfraConfig, VmRecord


class CloudError(Exception):
    """A cloud refused or failed: `message` is the cloud's own reason, shown to the user;
    `retryable` says whether trying again can help (throttling, a resource still settling)."""

    def __init__(self, message: str, *, retryable: bool = False, code: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.code = code


@dataclass
class StepContext:
    """What a provider method needs besides the config: the job's names and tags, a log, and a
    heartbeat to call while waiting (it renews the step's lease).

    `first_attempt` is True only when the runner knows no earlier attempt of this step ever ran
    (its claim took the attempt count from 0 to 1): nothing tagged with the job's token can exist
    for the step yet, so the provider may create without looking up first. Any later attempt (a
    retry, or a re-run after a worker died mid-step) leaves it False and every lookup runs."""

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
        interval = min(settings.ZOPDAY_PROVISIONING_POLL_SECONDS, 2.0)
        while not done():
            if time.monotonic() > deadline:
                raise CloudError(f"Timed out after {int(timeout)} s waiting for {what}.")
            self.heartbeat()
            time.sleep(interval)


def wait_for_sentinels(
    config: InfraConfig,
    ctx: StepContext,
    *,
    running: Callable[[list[VmRecord]], Collection[str]],
    present: Callable[[VmRecord], bool],
    shell: str,
) -> None:
    """stepCreateVMs' readiness wait, the same on every cloud: a VM the cloud reports running
    (`running` answers their ids) is bootstrapping until `present` finds its sentinel. It ends
    when every VM is ready; past ZOPDAY_PROVISIONING_READY_TIMEOUT, a CloudError says what to
    look at and how (`shell`: how to open one on that cloud)."""
    timeout = settings.ZOPDAY_PROVISIONING_READY_TIMEOUT
    deadline = time.monotonic() + timeout
    while pending := [vm for vm in config.vms if vm.state != VmState.READY]:
        up = running(pending)
        for vm in pending:
            if vm.instance_id not in up:
                continue
            vm.state = VmState.BOOTSTRAPPING
            if present(vm):
                vm.state = VmState.READY
                vm.ready_at = datetime.now(UTC).isoformat()
                ctx.log(f"{vm.instance_id}: sentinel {config.sentinel_path} present")
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
        time.sleep(settings.ZOPDAY_PROVISIONING_POLL_SECONDS)


class Provider(Protocol):
    name: str

    def check_connection(self) -> str: ...

    def validate(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def create_network(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def create_iam(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def create_launch_template(
        self, config: InfraConfig, ctx: StepContext, user_data: str
    ) -> str: ...

    def create_vms(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def wait_until_ready(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def create_load_balancer(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def create_target_group(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def create_listener(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def create_dns_record(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def update_health_check(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def detach_load_balancer(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def delete_vms(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def delete_launch_template(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def delete_security_group(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def delete_iam(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def delete_network(self, config: InfraConfig, ctx: StepContext) -> str: ...

    def describe_vms(self, config: InfraConfig, ctx: StepContext) -> list[dict[str, str]]: ...


class UnavailableProvider:
    """A provider that is not available yet: every call answers with the same clean Invalid."""

    name = "unavailable"
    reason = "Invalid: this provider is not available."

    def __getattr__(self, attribute: str) -> Callable[..., str]:
        def refuse(*args: object, **kwargs: object) -> str:
            raise CloudError(self.reason, retryable=False, code="Invalid")

        return refuse


F = TypeVar("F", bound=Callable[..., Any])


def mapped_with(errors: Callable[[], AbstractContextManager[None]]) -> Callable[[F], F]:
    """A decorator that runs a provider method inside `errors` (its SDK's mapped_errors), so
    that what the SDK raises reaches the pipeline as CloudError."""

    def decorate(method: F) -> F:
        @wraps(method)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with errors():
                return method(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
