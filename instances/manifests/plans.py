"""An instance's plan: what applying its document would do, as diff lines and the service calls
behind them. Planning only reads: it checks the spec against the API schema (names replaced by
ids), the ids the project may use, and that only fields the services can change differ, and
raises every problem together.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError

from instances.api.requests import instance_request
from instances.choices import LinkState
from instances.manifests.diffs import CONFIRM_PRIMARY, plan_update
from instances.manifests.documents import Document
from instances.manifests.errors import ManifestInvalid, Problem, service_problems
from instances.manifests.references import names_to_ids
from instances.manifests.schemas import InstanceSpec
from instances.manifests.specs import spec_checked
from instances.manifests.steps import Plan, Step
from instances.models import Instance, Project
from instances.services import network
from instances.services.instances import STARTS_ON_CREATE, InstanceRequest, instance_create


def plan_instance(document: Document, project: Project, actor: AbstractBaseUser) -> Plan:
    """An instance's plan: created whole, or changed where a service can change it."""
    raw, unknown = names_to_ids({**document.spec}, project)
    spec = spec_checked(document, InstanceSpec, raw, unknown)
    try:
        request = instance_request(project, spec)
    except ValidationError as error:
        raise ManifestInvalid(service_problems(error, document.where)) from None
    label = f"{project.slug}/{document.name}"
    instance = project.instances.filter(name=document.name).first()
    if instance is None:
        return _plan_create(document, label, project, actor, spec, request)
    return plan_update(
        document=document, label=label, instance=instance, actor=actor, spec=spec, request=request
    )


def _plan_create(
    document: Document,
    label: str,
    project: Project,
    actor: AbstractBaseUser,
    spec: InstanceSpec,
    request: InstanceRequest,
) -> Plan:
    """One instance_create call with everything; interfaces declared down follow, which needs
    the new instance to stay stopped (a transitional instance refuses link changes)."""
    plan = Plan(document, label, "create")
    source = f"image {request.root_image.name}" if request.root_image else "blank"
    plan.lines.append(f"+ disk {spec.name}-root {spec.root_size_gb} GB (root, {source})")
    for number, disk in enumerate(request.disks, start=1):
        image = f", image {disk.image.name}" if disk.image else ""
        name = disk.name or f"{spec.name}-disk{number}"
        plan.lines.append(f"+ disk {name} {disk.size_gb} GB ({disk.role}{image})")
    for index, nic in enumerate(request.nics):
        plan.lines.append(f"+ nic eth{index} on {nic.subnet.name}")

    created: list[Instance] = []
    plan.steps.append(
        Step(lambda: created.append(instance_create(project=project, actor=actor, request=request)))
    )
    problems = []
    for index, nic_spec in enumerate(spec.nics):
        if nic_spec.link == LinkState.UP:
            continue
        if spec.run_strategy in STARTS_ON_CREATE:
            problems.append(
                Problem(
                    document.where,
                    f"nics-{index}-link",
                    f"With run strategy {spec.run_strategy} the instance starts as it is created, "
                    "with every link up; create it with the link up and apply link: down once it "
                    "runs, or create it with run strategy Manual.",
                )
            )
            continue
        plan.lines.append(f"~ nic eth{index}: link down")

        def link_down(index: int = index, confirm: bool = nic_spec.confirm_primary) -> None:
            nic = created[0].nics.get(index=index)
            network.nic_set_link(nic=nic, actor=actor, up=False, confirm_primary=confirm)

        hint = CONFIRM_PRIMARY if index == 0 and not nic_spec.confirm_primary else ""
        plan.steps.append(Step(link_down, path=f"nics-{index}-link", hint=hint))
    if problems:
        raise ManifestInvalid(problems)
    return plan
