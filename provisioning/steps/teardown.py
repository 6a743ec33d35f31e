"""Teardown steps, in the seed's order: detach the LB, terminate the VMs (ASG to 0 then
delete), the launch template, the security group, the IAM role, and the network only if the job
created it."""

from provisioning.pipeline import Run, step
from provisioning.services.space import space_unregister


@step("stepDetachLoadBalancer")
def step_detach_load_balancer(run: Run) -> str:
    message = run.provider.detach_load_balancer(run.config, run.ctx)
    if run.job.phase == "detach_lb":
        run.config.load_balancer = False
        run.ctx.save()
    return message


@step("stepTerminateVMs")
def step_terminate_vms(run: Run) -> str:
    message = run.provider.delete_vms(run.config, run.ctx)
    space_unregister(job=run.job, config=run.config)
    run.ctx.save()
    return message


@step("stepDeleteLaunchTemplate")
def step_delete_launch_template(run: Run) -> str:
    return run.provider.delete_launch_template(run.config, run.ctx)


@step("stepDeleteSecurityGroup")
def step_delete_security_group(run: Run) -> str:
    return run.provider.delete_security_group(run.config, run.ctx)


@step("stepDeleteIAM")
def step_delete_iam(run: Run) -> str:
    return run.provider.delete_iam(run.config, run.ctx)


@step("stepDeleteNetwork")
def step_delete_network(run: Run) -> str:
    return run.provider.delete_network(run.config, run.ctx)
