from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from instances import actions
from instances.access import project_role
from instances.models import Project, SSHKey
from instances.services.audit import audit_record


@transaction.atomic
def ssh_key_add(*, project: Project, actor: AbstractBaseUser, name: str, public_key: str) -> SSHKey:
    actions.require(actions.manage(project_role(actor, project)))
    key = SSHKey(project=project, name=name.strip(), public_key=public_key)
    key.full_clean()
    key.save()
    audit_record(actor=actor, action="ssh_key.add", project=project, target=key)
    return key


@transaction.atomic
def ssh_key_remove(*, key: SSHKey, actor: AbstractBaseUser) -> None:
    """Instances keep the key they were created with; new seeds no longer carry it."""
    actions.require(actions.manage(project_role(actor, key.project)))
    audit_record(actor=actor, action="ssh_key.remove", project=key.project, target=key)
    key.delete()
