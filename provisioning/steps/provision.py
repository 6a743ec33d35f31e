"""Provisioning steps: stepValidate … stepFinalize."""

from django.utils import timezone

from provisioning.choices import VmState
from provisioning.pipeline import Run, step
from provisioning.services.space import space_register
from provisioning.userdata import user_data


@step("stepValidate")
def step_validate(run: Run) -> str:
    return run.provider.validate(run.config, run.ctx)


@step("stepCreateNetwork")
def step_create_network(run: Run) -> str:
    return run.provider.create_network(run.config, run.ctx)


@step("stepCreateIAM")
def step_create_iam(run: Run) -> str:
    return run.provider.create_iam(run.config, run.ctx)


@step("stepCreateLaunchTemplate")
def step_create_launch_template(run: Run) -> str:
    return run.provider.create_launch_template(run.config, run.ctx, user_data(run.config))


@step("stepCreateVMs")
def step_create_vms(run: Run) -> str:
    """Launch the pool, then wait for the bootstrap sentinel on every VM."""
    launched = run.provider.create_vms(run.config, run.ctx)
    run.ctx.log(launched)
    return run.provider.wait_until_ready(run.config, run.ctx)


@step("stepCreateLoadBalancer")
def step_create_load_balancer(run: Run) -> str:
    return run.provider.create_load_balancer(run.config, run.ctx)


@step("stepCreateTargetGroup")
def step_create_target_group(run: Run) -> str:
    return run.provider.create_target_group(run.config, run.ctx)


@step("stepCreateListener")
def step_create_listener(run: Run) -> str:
    return run.provider.create_listener(run.config, run.ctx)


@step("stepCreateDNSRecord")
def step_create_dns_record(run: Run) -> str:
    return run.provider.create_dns_record(run.config, run.ctx)


@step("stepUpdateHealthCheck")
def step_update_health_check(run: Run) -> str:
    """After provisioning: the target group checks the path and port the job now names."""
    return run.provider.update_health_check(run.config, run.ctx)


@step("stepRegisterSpace")
def step_register_space(run: Run) -> str:
    """Record the environment in the console: its VMs become instances of the project."""
    vms = run.provider.describe_vms(run.config, run.ctx)
    return space_register(job=run.job, config=run.config, vms=vms)


@step("stepFinalize")
def step_finalize(run: Run) -> str:
    vms = run.provider.describe_vms(run.config, run.ctx)
    states = {vm["instance_id"]: vm["state"] for vm in vms}
    for vm in run.config.vms:
        if states.get(vm.instance_id) == "running" and vm.state != VmState.READY:
            vm.state = VmState.READY
    run.config.space["ready_at"] = timezone.now().isoformat(timespec="seconds")
    run.ctx.save()
    return f"Ready: {len(run.config.vms)} VM(s) in {run.job.region}."
