"""Elastic IPs in manifests. An address comes from the pool, so the manifest names it and
remembers which address the name got (ManagedObject.object_id); `nic` is the API's field, by
id or as instance/ethN. An address exported before apply managed it is named by itself."""

import ipaddress
from functools import partial
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import OuterRef, Subquery
from ninja import Field

from instances.api.schemas import Id, In
from instances.manifests.documents import Document
from instances.manifests.kinds import Kind
from instances.manifests.specs import raise_if, spec_checked
from instances.manifests.steps import Plan, Step
from instances.models import ElasticIP, ManagedObject, NetworkInterface, Project
from instances.selectors import chosen
from instances.services.network import eip_allocate, eip_associate, eip_release

CHOOSE_NIC = "Choose an interface of this project."


class ElasticIPSpec(In):
    """The API's ElasticIPAssociateIn, where no interface means a free address."""

    nic: Id | None = Field(None, description="The interface it routes to; none: it stays free.")


def _find(project: Project, name: str) -> ElasticIP | None:
    row = ManagedObject.objects.filter(project=project, kind="ElasticIP", name=name).first()
    if row is not None and row.object_id is not None:
        return project.elastic_ips.filter(pk=row.object_id).first()
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return None
    return project.elastic_ips.filter(address=name).first()


def _nic_id(project: Project, value: object) -> tuple[object, str]:
    if not isinstance(value, str):
        return value, ""
    instance, _, interface = value.partition("/")
    nic = NetworkInterface.objects.filter(
        instance__project=project,
        instance__name=instance,
        index=int(interface.removeprefix("eth")) if interface.removeprefix("eth").isdigit() else -1,
    ).first()
    return (nic.pk, "") if nic else (value, f"{CHOOSE_NIC} Name it as instance/eth0.")


def _plan(document: Document, project: Project, actor: AbstractBaseUser) -> Plan:
    raw = dict(document.spec)
    raw["nic"], missing = _nic_id(project, raw.get("nic"))
    spec = spec_checked(
        document, ElasticIPSpec, raw, {"nic": missing} if missing else {}, named=False
    )
    interfaces = NetworkInterface.objects.filter(instance__project=project)
    nic = chosen(interfaces, spec.nic, "nic", CHOOSE_NIC) if spec.nic else None
    label = f"{project.slug}/{document.name}"
    eip = _find(project, document.name)
    plan = Plan(document, label)
    if eip is None:
        plan.verb = "create"
        plan.lines.append("+ an address from the pool" + (f", on {nic}" if nic else ""))
        made: list[ElasticIP] = []

        def allocate() -> None:
            made.append(eip_allocate(project=project, actor=actor))
            ManagedObject.objects.update_or_create(
                project=project, kind="ElasticIP", name=document.name,
                defaults={"object_id": made[0].pk},
            )  # fmt: skip

        plan.steps.append(Step(allocate))
        if nic is not None:
            plan.steps.append(
                Step(lambda: eip_associate(eip=made[0], nic=nic, actor=actor), path="nic")
            )
        return plan
    if eip.nic_id != (nic.pk if nic else None):
        plan.verb = "change"
        if eip.nic_id:
            plan.lines.append(f"~ {eip.address}: off {eip.nic}")
            plan.steps.append(Step(partial(eip_release, eip=eip, actor=actor), path="nic"))
        if nic is not None:
            plan.lines.append(f"~ {eip.address}: on {nic}")
            plan.steps.append(
                Step(partial(eip_associate, eip=eip, nic=nic, actor=actor), path="nic")
            )
    raise_if([])
    return plan


def _spec(eip: ElasticIP, redact: bool) -> dict[str, Any]:
    nic = eip.nic
    return {"nic": f"{nic.instance.name}/{nic.name}" if nic else None}


def _managed_names() -> Subquery:
    rows = ManagedObject.objects.filter(
        project_id=OuterRef("project_id"), kind="ElasticIP", object_id=OuterRef("pk")
    )
    return Subquery(rows.values("name")[:1])


def _objects(project: Project) -> Any:
    """The project's addresses, each with the name apply knows it by (one query for all)."""
    found = project.elastic_ips.select_related("nic__instance")
    return found.annotate(managed_name=_managed_names()).order_by("address")


def _name(eip: ElasticIP) -> str:
    """The document's name: the one apply made it under, else its address."""
    if hasattr(eip, "managed_name"):
        managed = getattr(eip, "managed_name")  # noqa: B009 (an annotation mypy cannot see)
    else:
        managed = ElasticIP.objects.filter(pk=eip.pk).values_list(_managed_names(), flat=True)[0]
    return str(managed or eip.address)


def _delete(eip: ElasticIP, actor: AbstractBaseUser, force: bool) -> None:
    if eip.nic_id:
        eip_release(eip=eip, actor=actor)  # disassociates
    eip_release(eip=eip, actor=actor)


ELASTIC_IP = Kind(
    name="ElasticIP",
    order=60,
    plan=_plan,
    find=_find,
    objects=_objects,
    spec_of=_spec,
    delete=_delete,
    name_of=_name,
)
