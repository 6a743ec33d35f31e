"""The sandbox's epoch: moto keeps its state in memory, so a restart forgets every VM. A marker
parameter written into moto when a sandbox job is validated tells a reset sandbox (the marker
gone, or another one) from a VM deleted there."""

import secrets

from botocore.exceptions import ClientError

from provisioning.clouds.aws.sdk import client_for, mapped_errors
from provisioning.models import CloudAccount

MARKER = "/zopday/sandbox/epoch"


def sandbox_epoch(account: CloudAccount, region: str, *, create: bool) -> str:
    """The marker this moto holds ("" when it holds none); with `create`, one is written first
    where there is none."""
    ssm = client_for(account, "ssm", region)
    with mapped_errors():
        try:
            return str(ssm.get_parameter(Name=MARKER)["Parameter"]["Value"])
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ParameterNotFound":
                raise
        if not create:
            return ""
        epoch = secrets.token_hex(8)
        ssm.put_parameter(Name=MARKER, Value=epoch, Type="String", Overwrite=False)
        return epoch


def sandbox_was_reset(account: CloudAccount, region: str, recorded: str) -> bool:
    """The sandbox no longer holds the epoch a job recorded when it was validated."""
    return account.sandbox and sandbox_epoch(account, region, create=False) != recorded
