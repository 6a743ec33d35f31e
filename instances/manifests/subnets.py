"""Subnets in manifests: the API's SubnetIn; an existing subnet is compared, not changed (no
service changes a subnet's addresses)."""

from functools import partial
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from instances.api.schemas import SubnetIn
from instances.manifests.documents import Document
from instances.manifests.kinds import Kind
from instances.manifests.specs import fixed_problems, raise_if, spec_checked
from instances.manifests.steps import Plan, Step
from instances.models import Project, Subnet
from instances.services.network import subnet_create, subnet_delete


def _plan(document: Document, project: Project, actor: AbstractBaseUser) -> Plan:
    spec = spec_checked(document, SubnetIn)
    label = f"{project.slug}/{document.name}"
    subnet = project.subnets.filter(name=document.name).first()
    if subnet is None:
        plan = Plan(document, label, "create")
        addresses = ", ".join(cidr for cidr in (spec.cidr_v4, spec.cidr_v6) if cidr)
        plan.lines.append(f"+ {addresses} in {spec.zone}")
        fields = spec.model_dump()
        plan.steps.append(Step(partial(subnet_create, project=project, actor=actor, **fields)))
        return plan
    differences: dict[str, tuple[object, object]] = {
        "zone": (subnet.zone, spec.zone),
        "cidr_v4": (subnet.cidr_v4, spec.cidr_v4.strip()),
        "cidr_v6": (subnet.cidr_v6, spec.cidr_v6.strip()),
        "dns_resolvers": (subnet.dns_resolvers, spec.dns_resolvers),
    }
    if spec.gateway:
        differences["gateway"] = (subnet.gateway, spec.gateway)
    raise_if(fixed_problems(document, "subnet", differences))
    return Plan(document, label)


def _spec(subnet: Subnet, redact: bool) -> dict[str, Any]:
    return {
        "zone": subnet.zone,
        "cidr_v4": subnet.cidr_v4,
        "cidr_v6": subnet.cidr_v6,
        "gateway": subnet.gateway,
        "dns_resolvers": subnet.dns_resolvers,
    }


def _delete(subnet: Subnet, actor: AbstractBaseUser, force: bool) -> None:
    subnet_delete(subnet=subnet, actor=actor)


SUBNET = Kind(
    name="Subnet",
    order=10,
    plan=_plan,
    find=lambda project, name: project.subnets.filter(name=name).first(),
    objects=lambda project: project.subnets.order_by("name"),
    spec_of=_spec,
    delete=_delete,
)
