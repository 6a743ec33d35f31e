"""boto3 for the AWS steps and the AWS VM backend: cached clients (endpoint URL, role ARN and
the decrypted secret included), the region's zones, and SDK errors turned into CloudError with
`retryable` set for throttling, server errors, and resources that are still settling."""

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import botocore.session
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    HTTPClientError,
)
from botocore.parsers import ResponseParserError
from django.conf import settings

from instances.egress import EgressRefused
from instances.egress.http import pin_pools
from provisioning.clouds.errors import CloudError, mapped_with
from provisioning.models import CloudAccount

# Error codes after which a later try can succeed: throttling, the service itself, and
# resources that are still being created or deleted.
RETRYABLE_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "TooManyRequestsException",
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
        "DependencyViolation",
        "PriorRequestNotComplete",
        "ResourceInUse",
        "ScalingActivityInProgress",
        "IncorrectInstanceState",
        "InvalidInstanceId",
    }
)

# ---- clients --------------------------------------------------------------------------------
# One botocore session for the process (it caches the service models); clients are cached per
# account, region and service, because building one costs tens of milliseconds.
_botocore_session = botocore.session.get_session()
_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()
ROLE_CREDENTIALS_SECONDS = 45 * 60


def client_config(quick: bool = False) -> Config:
    # The pipeline retries transient errors itself, with its own backoff and a record of every
    # attempt; the SDK's own retries would hide them. A quick client (Test connection, which a
    # page waits for) gives up well before the web server's worker timeout.
    quick_timeout = settings.ZOPDAY_CLOUD_CHECK_TIMEOUT
    return Config(
        retries={"max_attempts": 1, "mode": "standard"},
        proxies={},  # not None, which reads HTTP(S)_PROXY: the policy checks whom it connects to
        connect_timeout=min(5, quick_timeout) if quick else 10,
        read_timeout=quick_timeout if quick else 60,
        user_agent_extra="zopday-console",
    )


def account_key(account: CloudAccount) -> tuple[Any, ...]:
    """What a cached client or answer depends on: a changed account is a new key."""
    return (
        account.pk,
        account.updated_at,
        account.endpoint_url,
        account.access_key_id,
        account.role_arn,
    )


def client_for(account: CloudAccount, service: str, region: str, quick: bool = False) -> Any:
    """The cached boto3 client of the account for a service in a region (honours the account's
    endpoint URL and role ARN); `quick`: with short timeouts."""
    key = (*account_key(account), service, region, quick)
    with _clients_lock:
        entry = _clients.get(key)
        if entry is not None and entry[1] > time.monotonic():
            return entry[0]
        credentials = _credentials(account, region)
        session = boto3.session.Session(botocore_session=_botocore_session)
        client = pinned(
            account,
            session.client(
                service,  # type: ignore[call-overload]
                region_name=region,
                endpoint_url=account.endpoint_url or None,
                config=client_config(quick),
                **credentials,
            ),
        )
        lifetime = ROLE_CREDENTIALS_SECONDS if account.role_arn else 10**9
        _clients[key] = (client, time.monotonic() + lifetime)
        return client


def pinned(account: CloudAccount, client: Any) -> Any:
    """The client's connections bound by the egress policy (instances.egress) at connect time:
    an endpoint whose name resolves to a blocked address is refused before a byte is sent.
    A sandbox account (the console's own fake cloud on loopback) is exempt."""
    if not account.sandbox:
        pin_pools(client._endpoint.http_session._pool_classes_by_scheme)
    return client


# The available zones of an account's region as the last describe saw them. stepValidate asks
# for every job; stepCreateNetwork, right after it, plans its subnets from that answer instead of
# asking again (a miss, e.g. on another worker, asks). Zones of a region change rarely.
_zones: dict[tuple[Any, ...], tuple[list[str], float]] = {}
ZONES_SECONDS = 15 * 60


def forget_clients() -> None:
    with _clients_lock:
        _clients.clear()
        _zones.clear()


def _credentials(account: CloudAccount, region: str) -> dict[str, str]:
    keys = {}
    if account.access_key_id:
        keys = {
            "aws_access_key_id": account.access_key_id,
            "aws_secret_access_key": account.secret_access_key,
        }
    if not account.role_arn:
        return keys
    session = boto3.session.Session(botocore_session=_botocore_session)
    sts = pinned(
        account,
        session.client(
            "sts",  # type: ignore[call-overload]
            region_name=region,
            endpoint_url=account.endpoint_url or None,
            config=client_config(),
            **keys,
        ),
    )
    with mapped_errors():
        assumed = sts.assume_role(RoleArn=account.role_arn, RoleSessionName="zopday-console")
    creds = assumed["Credentials"]
    return {
        "aws_access_key_id": creds["AccessKeyId"],
        "aws_secret_access_key": creds["SecretAccessKey"],
        "aws_session_token": creds["SessionToken"],
    }


# ---- errors ---------------------------------------------------------------------------------
NOT_AWS = (
    "The endpoint did not answer as AWS does (its reply is not an AWS API reply): check the "
    "account's endpoint URL."
)


@contextmanager
def mapped_errors() -> Iterator[None]:
    """Turn what boto3 raises into CloudError carrying the cloud's own message."""
    try:
        yield
    except ClientError as error:
        details = error.response.get("Error", {})
        code = str(details.get("Code", "Error"))
        message = str(details.get("Message", "")) or str(error)
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        retryable = code in RETRYABLE_CODES or status >= 500 or code.endswith(".NotFound")
        operation = error.operation_name
        raise CloudError(
            f"{operation}: {code}: {message}", retryable=retryable, code=code
        ) from error
    except ResponseParserError as error:  # its text quotes the reply, which is not shown
        raise CloudError(NOT_AWS, retryable=False, code="NotAws") from error
    except EndpointConnectionError as error:
        raise CloudError(f"Cannot reach AWS: {error}", retryable=True, code="Connection") from error
    except HTTPClientError as error:
        cause = error.kwargs.get("error")
        if isinstance(cause, EgressRefused):
            raise CloudError(cause.message, retryable=False, code="Egress") from error
        raise CloudError(f"AWS SDK: {error}", retryable=False, code=type(error).__name__) from error
    except BotoCoreError as error:
        raise CloudError(f"AWS SDK: {error}", retryable=False, code=type(error).__name__) from error


mapped = mapped_with(mapped_errors)  # the decorator of the cloud's step methods


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def get_or_none(get: Callable[..., Any], key: str, **kwargs: Any) -> Any:
    """An IAM get_* answer's `key`, or None when the entity does not exist."""
    try:
        return get(**kwargs)[key]
    except ClientError as error:
        if error_code(error) != "NoSuchEntity":
            raise
        return None


def tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value} for key, value in tags.items()]


def available_zones(account: CloudAccount, region: str, *, cached: bool) -> list[str]:
    """The region's available zones: asked for, or (`cached`) as last seen in this process
    within ZONES_SECONDS."""
    key = (*account_key(account), region)
    entry = _zones.get(key)
    if cached and entry is not None and entry[1] > time.monotonic():
        return entry[0]
    zones = [
        zone["ZoneName"]
        for zone in client_for(account, "ec2", region).describe_availability_zones()[
            "AvailabilityZones"
        ]
        if zone.get("State", "available") == "available"
    ]
    if not zones:
        raise CloudError(f"The region {region} has no available zones.")
    _zones[key] = (zones, time.monotonic() + ZONES_SECONDS)
    return zones
