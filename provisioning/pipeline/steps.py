"""The pipeline's steps, each named once with the seed's name (shown in the UI and logs, and
stored as JobStep.name), and the steps of each phase in order.

    stepValidate → stepCreateNetwork → stepCreateIAM → stepCreateLaunchTemplate → stepCreateVMs
        → [stepCreateLoadBalancer, stepCreateTargetGroup, stepCreateListener, stepCreateDNSRecord]
        → stepRegisterSpace → stepFinalize

7 steps without a load balancer, 11 with; the teardown runs the seed's order.
"""

from collections.abc import Callable
from dataclasses import dataclass

from django.utils import timezone

from provisioning.choices import Phase, VmState
from provisioning.clouds.base import CloudSteps
from provisioning.clouds.context import StepContext
from provisioning.infra import InfraConfig
from provisioning.models import ProvisioningJob
from provisioning.space import space_register, space_unregister
from provisioning.userdata import user_data


@dataclass
class Run:
    """What a step gets: the job, its InfraConfig, its cloud's calls and the step context."""

    job: ProvisioningJob
    config: InfraConfig
    cloud: CloudSteps
    ctx: StepContext


@dataclass(frozen=True)
class Step:
    name: str  # the seed's name: stepCreateLaunchTemplate
    run: Callable[[Run], str]


def _create_vms(run: Run) -> str:
    """Launch the pool, then wait for the bootstrap sentinel on every VM."""
    run.ctx.log(run.cloud.create_vms(run.config, run.ctx))
    return run.cloud.wait_until_ready(run.config, run.ctx)


def _all_ready(config: InfraConfig) -> bool:
    return bool(config.vms) and all(vm.state == VmState.READY for vm in config.vms)


def _register_space(run: Run) -> str:
    """Record the environment in the console: its VMs become instances of the project. Right
    after stepCreateVMs found every VM's sentinel (they run, their address and zone are known),
    the first attempt takes them as recorded; a later attempt asks the cloud again."""
    known = all(vm.private_ip and vm.zone for vm in run.config.vms)
    if run.ctx.first_attempt and known and _all_ready(run.config):
        vms = [
            {"instance_id": vm.instance_id, "state": "running", "private_ip": vm.private_ip,
             "zone": vm.zone}
            for vm in run.config.vms
        ]  # fmt: skip
    else:
        vms = run.cloud.describe_vms(run.config, run.ctx)
    return space_register(job=run.job, config=run.config, vms=vms)


def _finalize(run: Run) -> str:
    """Mark the VMs that run as ready; when every one already is, there is nothing to ask."""
    if not _all_ready(run.config):
        described = run.cloud.describe_vms(run.config, run.ctx)
        states = {vm["instance_id"]: vm["state"] for vm in described}
        for vm in run.config.vms:
            if states.get(vm.instance_id) == "running" and vm.state != VmState.READY:
                vm.state = VmState.READY
    run.config.space["ready_at"] = timezone.now().isoformat(timespec="seconds")
    run.ctx.save()
    return f"Ready: {len(run.config.vms)} VM(s) in {run.job.region}."


def _detach_load_balancer(run: Run) -> str:
    message = run.cloud.detach_load_balancer(run.config, run.ctx)
    if run.job.phase == Phase.DETACH_LB:
        run.config.load_balancer = False
        run.ctx.save()
    return message


def _terminate_vms(run: Run) -> str:
    message = run.cloud.delete_vms(run.config, run.ctx)
    space_unregister(job=run.job, config=run.config)
    run.ctx.save()
    return message


PROVISION = (
    Step("stepValidate", lambda run: run.cloud.validate(run.config, run.ctx)),
    Step("stepCreateNetwork", lambda run: run.cloud.create_network(run.config, run.ctx)),
    Step("stepCreateIAM", lambda run: run.cloud.create_iam(run.config, run.ctx)),
    Step(
        "stepCreateLaunchTemplate",
        lambda run: run.cloud.create_launch_template(run.config, run.ctx, user_data(run.config)),
    ),
    Step("stepCreateVMs", _create_vms),
)
LOAD_BALANCER = (
    Step("stepCreateLoadBalancer", lambda run: run.cloud.create_load_balancer(run.config, run.ctx)),
    Step("stepCreateTargetGroup", lambda run: run.cloud.create_target_group(run.config, run.ctx)),
    Step("stepCreateListener", lambda run: run.cloud.create_listener(run.config, run.ctx)),
    Step("stepCreateDNSRecord", lambda run: run.cloud.create_dns_record(run.config, run.ctx)),
)
FINAL = (Step("stepRegisterSpace", _register_space), Step("stepFinalize", _finalize))
# After provisioning: the target group checks the path and port the job now names.
HEALTH_CHECK = Step(
    "stepUpdateHealthCheck", lambda run: run.cloud.update_health_check(run.config, run.ctx)
)
DETACH = Step("stepDetachLoadBalancer", _detach_load_balancer)
TEARDOWN = (
    DETACH,
    Step("stepTerminateVMs", _terminate_vms),
    Step(
        "stepDeleteLaunchTemplate",
        lambda run: run.cloud.delete_launch_template(run.config, run.ctx),
    ),
    Step(
        "stepDeleteSecurityGroup", lambda run: run.cloud.delete_security_group(run.config, run.ctx)
    ),
    Step("stepDeleteIAM", lambda run: run.cloud.delete_iam(run.config, run.ctx)),
    Step("stepDeleteNetwork", lambda run: run.cloud.delete_network(run.config, run.ctx)),
)
STEPS = {step.name: step for step in (*PROVISION, *LOAD_BALANCER, *FINAL, HEALTH_CHECK, *TEARDOWN)}
LB_STEPS = [step.name for step in LOAD_BALANCER]


def steps_for(phase: str, config: InfraConfig) -> list[str]:
    """The names of a phase's steps, in order."""
    if phase == Phase.PROVISION:
        lb = LOAD_BALANCER if config.load_balancer else ()
        return [step.name for step in (*PROVISION, *lb, *FINAL)]
    if phase == Phase.ATTACH_LB:
        return list(LB_STEPS)
    if phase == Phase.DETACH_LB:
        return [DETACH.name]
    if phase == Phase.HEALTH_CHECK:
        return [HEALTH_CHECK.name]
    return [step.name for step in TEARDOWN]
