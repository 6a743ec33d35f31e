"""SSH keys in manifests: the API's SSHKeyIn; a key's text is fixed once added."""

from functools import partial
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from instances.api.schemas import SSHKeyIn
from instances.manifests.documents import Document
from instances.manifests.kinds import Kind
from instances.manifests.specs import fixed_problems, raise_if, spec_checked
from instances.manifests.steps import Plan, Step
from instances.models import Project, SSHKey
from instances.services.keys import ssh_key_add, ssh_key_remove


def _plan(document: Document, project: Project, actor: AbstractBaseUser) -> Plan:
    spec = spec_checked(document, SSHKeyIn)
    label = f"{project.slug}/{document.name}"
    key = project.ssh_keys.filter(name=document.name.strip()).first()
    if key is None:
        plan = Plan(document, label, "create")
        fields = spec.model_dump()
        plan.steps.append(Step(partial(ssh_key_add, project=project, actor=actor, **fields)))
        return plan
    wanted = " ".join(spec.public_key.split())
    raise_if(
        fixed_problems(
            document, "SSH key", {"public_key": (" ".join(key.public_key.split()), wanted)}
        )
    )
    return Plan(document, label)


def _spec(key: SSHKey, redact: bool) -> dict[str, Any]:
    return {"public_key": key.public_key}


def _delete(key: SSHKey, actor: AbstractBaseUser, force: bool) -> None:
    ssh_key_remove(key=key, actor=actor)


SSH_KEY = Kind(
    name="SSHKey",
    order=20,
    plan=_plan,
    find=lambda project, name: project.ssh_keys.filter(name=name).first(),
    objects=lambda project: project.ssh_keys.order_by("name"),
    spec_of=_spec,
    delete=_delete,
)
