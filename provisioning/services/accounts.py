"""Cloud accounts: create them (the secret encrypted at rest) and test their connection."""

import logging

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from instances.access import project_role
from instances.actions import Allowed, require
from instances.choices import Outcome, Role
from instances.models import Project
from instances.services import audit_record
from provisioning.clouds import CLOUDS, DEFAULT, available, steps_for_account
from provisioning.clouds.base import AccountCredentials
from provisioning.clouds.errors import CloudError
from provisioning.endpoints import endpoint_refusal
from provisioning.models import CloudAccount
from provisioning.validation import region_error

logger = logging.getLogger(__name__)


def account_create(
    *,
    project: Project,
    actor: AbstractBaseUser | None,
    name: str,
    provider: str = DEFAULT.name,
    default_region: str = "us-east-1",
    access_key_id: str = "",
    secret_access_key: str = "",
    role_arn: str = "",
    service_account_key: str = "",
    gcp_project: str = "",
    endpoint_url: str = "",
    sandbox: bool = False,
) -> CloudAccount:
    """AWS: access keys (and/or a role). GCP: a service account key, whose client email is kept
    as the access key id, and the project (the key's own unless another is named)."""
    if actor is not None:
        role = project_role(actor, project)
        require(Allowed(bool(role and role.allows(Role.ADMIN)), "Needs the admin role."))
    if CloudAccount.objects.filter(project=project, name=name).exists():
        raise ValidationError({"name": "The project already has an account with this name."})
    if message := endpoint_refusal(endpoint_url, actor, sandbox=sandbox):
        raise ValidationError({"endpoint_url": message})
    if provider not in CLOUDS or CLOUDS[provider].refusal:
        labels = " or ".join(cloud.label for cloud in available())
        raise ValidationError({"provider": f"Choose {labels}."})
    credentials = CLOUDS[provider].account_credentials(
        AccountCredentials(
            access_key_id=access_key_id, secret_access_key=secret_access_key, role_arn=role_arn,
            service_account_key=service_account_key, gcp_project=gcp_project,
        ),
        actor,
    )  # fmt: skip
    if message := region_error(provider, default_region):
        raise ValidationError({"default_region": message})
    account = CloudAccount(
        project=project,
        name=name,
        provider=provider,
        default_region=default_region,
        access_key_id=credentials.access_key_id,
        role_arn=credentials.role_arn,
        gcp_project=credentials.gcp_project,
        endpoint_url=endpoint_url,
        sandbox=sandbox,
    )
    account.secret_access_key = credentials.secret_access_key
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
        message, ok = steps_for_account(account).check_connection(), True
    except CloudError as error:
        message, ok = error.message, False
    except Exception as error:  # a reply no SDK mapping foresaw: a message, not a 500
        logger.warning("cloud account %s: the check failed: %r", account.pk, error)
        ok = False
        message = (
            f"The check failed ({type(error).__name__}): the endpoint's reply was not understood."
        )
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
