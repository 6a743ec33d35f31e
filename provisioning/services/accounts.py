"""Cloud accounts: create them (the secret encrypted at rest) and test their connection."""

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from instances.access import project_role
from instances.actions import Allowed, require
from instances.choices import Outcome, Role
from instances.models import Project
from instances.services import audit_record
from provisioning.models import CloudAccount
from provisioning.providers import CloudError, provider_for


def account_create(
    *,
    project: Project,
    actor: AbstractBaseUser | None,
    name: str,
    provider: str = "aws",
    default_region: str = "us-east-1",
    access_key_id: str = "",
    secret_access_key: str = "",
    role_arn: str = "",
    endpoint_url: str = "",
    sandbox: bool = False,
) -> CloudAccount:
    if actor is not None:
        role = project_role(actor, project)
        require(Allowed(bool(role and role.allows(Role.ADMIN)), "Needs the admin role."))
    if CloudAccount.objects.filter(project=project, name=name).exists():
        raise ValidationError({"name": "The project already has an account with this name."})
    if not role_arn and not (access_key_id and secret_access_key):
        raise ValidationError({"access_key_id": "Give an access key and its secret, or a role."})
    account = CloudAccount(
        project=project,
        name=name,
        provider=provider,
        default_region=default_region,
        access_key_id=access_key_id,
        role_arn=role_arn,
        endpoint_url=endpoint_url,
        sandbox=sandbox,
    )
    account.secret_access_key = secret_access_key
    account.full_clean(exclude=["secret_access_key_encrypted"])
    with transaction.atomic():
        account.save()
        audit_record(actor=actor, action="cloud_account.create", project=project, target=account)
    return account


def account_check(*, account: CloudAccount, actor: AbstractBaseUser) -> CloudAccount:
    """Call the cloud with the account's credentials and remember the answer."""
    role = project_role(actor, account.project)
    require(Allowed(bool(role and role.allows(Role.OPERATOR)), "Needs the operator role."))
    try:
        message, ok = provider_for(account).check_connection(), True
    except CloudError as error:
        message, ok = error.message, False
    CloudAccount.objects.filter(pk=account.pk).update(
        last_checked_at=timezone.now(), last_check_ok=ok, last_check_message=message[:500]
    )
    audit_record(
        actor=actor,
        action="cloud_account.check",
        project=account.project,
        target=account,
        outcome=Outcome.SUCCESS if ok else Outcome.FAILURE,
        message=message[:500],
    )
    account.refresh_from_db()
    return account
