"""Plans: what applying one document would do, as diff lines and the service calls behind them.

Planning only reads. Before anything is written it checks every document (the operator role,
the spec against the API schema with names replaced by ids, the ids the project may use, and
that only fields the services can change differ) and raises every problem together.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from pydantic import ValidationError as SchemaValidationError

from instances.access import project_for_user
from instances.api.requests import instance_request
from instances.choices import LinkState, Role
from instances.manifests.diffs import CONFIRM_PRIMARY, plan_update
from instances.manifests.documents import Document
from instances.manifests.errors import ManifestInvalid, Problem, schema_problems, service_problems
from instances.manifests.references import names_to_ids
from instances.manifests.schemas import InstanceSpec
from instances.manifests.steps import Plan, Step
from instances.models import Instance, Project
from instances.services import network
from instances.services.instances import STARTS_ON_CREATE, InstanceRequest, instance_create


def plans_make(*, documents: list[Document], actor: AbstractBaseUser) -> list[Plan]:
    plans: list[Plan] = []
    problems: list[Problem] = []
    for document in documents:
        try:
            plans.append(_plan(document, actor))
        except ManifestInvalid as invalid:
            problems += invalid.problems
    if problems:
        raise ManifestInvalid(problems)
    return plans


def _plan(document: Document, actor: AbstractBaseUser) -> Plan:
    where = document.where
    try:
        project, _ = project_for_user(actor, document.project, Role.OPERATOR)
    except (Http404, PermissionDenied) as error:
        raise ManifestInvalid([Problem(where, "project", str(error))]) from None
    spec = _checked_spec(document, project)
    try:
        request = instance_request(project, spec)
    except ValidationError as error:
        raise ManifestInvalid(service_problems(error, where)) from None
    label = f"{project.slug}/{document.name}"
    instance = project.instances.filter(name=document.name).first()
    if instance is None:
        return _plan_create(document, label, project, actor, spec, request)
    return plan_update(
        document=document, label=label, instance=instance, actor=actor, spec=spec, request=request
    )


def _checked_spec(document: Document, project: Project) -> InstanceSpec:
    where = document.where
    if "name" in document.spec:
        message = "Give the name once, at the top of the document, not in spec."
        raise ManifestInvalid([Problem(where, "name", message)])
    raw, unknown = names_to_ids({"name": document.name, **document.spec}, project)
    problems = [Problem(where, path, message) for path, message in unknown.items()]
    try:
        spec = InstanceSpec.model_validate(raw)
    except SchemaValidationError as error:
        # A name that was not found is reported once, not again as "not an integer".
        problems += [
            problem
            for problem in schema_problems(error, where)
            if not any(
                problem.path == path or problem.path.startswith(f"{path}-") for path in unknown
            )
        ]
    if problems:
        raise ManifestInvalid(problems)
    return spec


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
