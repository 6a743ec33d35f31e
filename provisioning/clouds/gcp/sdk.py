"""GCP through google-cloud-compute: credentials, cached clients, errors and operations.

Only the gcp package (clouds/gcp/) imports Google's SDK. A GCP cloud account holds a
service account key (JSON, encrypted at rest) and the project it provisions in; its endpoint
URL, when set, points every client at another endpoint serving Compute, IAM and Cloud DNS (the
tests' local fake).

Operations are polled through the operations clients built with the same options, never with
`ExtendedOperation.result()`, whose own poller ignores a custom endpoint.
"""

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import requests
from google.api_core import exceptions as api_exceptions
from google.api_core.client_options import ClientOptions
from google.auth import exceptions as auth_exceptions
from google.auth.transport.requests import AuthorizedSession, Request
from google.cloud import compute_v1
from google.oauth2 import service_account

from instances.egress import EgressRefused
from instances.egress.http import pin_session, pinned_session
from provisioning.clouds.errors import CloudError, mapped_with
from provisioning.clouds.gcp.rules import service_account_key_problem
from provisioning.models import CloudAccount

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
API_ENDPOINTS = {"iam": "https://iam.googleapis.com", "dns": "https://dns.googleapis.com"}
# HTTP statuses and operation error codes after which a later try can succeed.
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
RETRYABLE_OPERATION_CODES = frozenset(
    {
        "RESOURCE_NOT_READY",
        "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE",
        "RESOURCE_OPERATION_RATE_EXCEEDED",
        "RATE_LIMIT_EXCEEDED",
        "INTERNAL_ERROR",
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    }
)
# Reasons of synchronous refusals that mean "not yet": rate limits, and resources still being
# made or still used by something on its way out.
RETRYABLE_REASONS = frozenset(
    {"rateLimitExceeded", "userRateLimitExceeded", "resourceNotReady",
     "resourceInUseByAnotherResource"}
)  # fmt: skip
OPERATION_DONE = compute_v1.Operation.Status.DONE
REQUEST_PREFIX = re.compile(r"^(GET|POST|PUT|PATCH|DELETE) \S+: ")

_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.RLock()  # a client is built with the cached credentials


def key_info(account: CloudAccount) -> dict[str, Any]:
    text = account.secret_access_key
    if problem := service_account_key_problem(text):
        raise CloudError(f"The account's service account key is unusable: {problem}")
    info: dict[str, Any] = json.loads(text)
    return info


def _account_key(account: CloudAccount) -> tuple[Any, ...]:
    return (account.pk, account.updated_at, account.endpoint_url, account.gcp_project)


def _cached(account: CloudAccount, kind: Any, build: Callable[[], Any]) -> Any:
    key = (*_account_key(account), kind)
    with _clients_lock:
        if key not in _clients:
            _clients[key] = build()
        return _clients[key]


def credentials_for(account: CloudAccount) -> service_account.Credentials:
    def build() -> service_account.Credentials:
        return service_account.Credentials.from_service_account_info(
            key_info(account), scopes=[CLOUD_PLATFORM]
        )

    credentials: service_account.Credentials = _cached(account, "credentials", build)
    return credentials


def client_for(account: CloudAccount, client_class: type) -> Any:
    """The account's cached client of one Compute service (InstancesClient, ...)."""

    def build() -> Any:
        options = ClientOptions(api_endpoint=account.endpoint_url) if account.endpoint_url else None
        client = client_class(credentials=credentials_for(account), client_options=options)
        transport = getattr(client, "_transport", None)
        session = getattr(transport, "_session", None)
        if isinstance(session, AuthorizedSession):  # the REST transport
            _pinned(account, session)
        return client

    return _cached(account, client_class, build)


def _session(account: CloudAccount) -> AuthorizedSession:
    session: AuthorizedSession = _cached(
        account, "session", lambda: _pinned(account, AuthorizedSession(credentials_for(account)))
    )
    return session


def _pinned(account: CloudAccount, session: AuthorizedSession) -> AuthorizedSession:
    """The session and its token requests bound by the egress policy (instances.egress) at
    connect time (a sandbox account, the console's own fake cloud, is exempt)."""
    if account.sandbox:
        return session
    pin_session(session)
    session._auth_request = Request(pinned_session())
    return session


def forget_clients() -> None:
    with _clients_lock:
        _clients.clear()


def google_api(
    account: CloudAccount, api: str, method: str, path: str, **kwargs: Any
) -> dict[str, Any] | None:
    """Call one of the REST APIs google-cloud-compute does not cover ("iam": service accounts,
    "dns": Cloud DNS) with the account's credentials. A GET or DELETE of something that does
    not exist answers None; any other error becomes CloudError with Google's message. An
    account's endpoint URL serves these too (the tests' fake serves all three)."""
    base = (account.endpoint_url or API_ENDPOINTS[api]).rstrip("/")
    response = _session(account).request(method, f"{base}/{path}", timeout=60, **kwargs)
    if response.status_code == 404 and method in ("GET", "DELETE"):
        return None
    if response.status_code >= 400:
        try:
            error = response.json().get("error", {})
        except ValueError:
            error = {}
        details = error.get("errors") or [{}]
        reason = str(error.get("status") or details[0].get("reason") or response.status_code)
        raise CloudError(
            error.get("message") or f"Google answered {response.status_code}.",
            retryable=response.status_code in RETRYABLE_STATUS or reason in RETRYABLE_REASONS,
            code=reason,
        )
    answer: dict[str, Any] = response.json() if response.content else {}
    return answer


# ---- errors ---------------------------------------------------------------------------------
NOT_GOOGLE = (
    "The endpoint did not answer as Google Cloud does (its reply is not a Google API reply): "
    "check the account's endpoint URL."
)


def _json_reply(response: Any) -> bool:
    """The HTTP reply behind an SDK error is JSON (or there is no reply to look at)."""
    if not isinstance(response, requests.Response):
        return True
    try:
        response.json()
    except ValueError:
        return False
    return True


@contextmanager
def mapped_errors() -> Iterator[None]:
    """SDK, auth and transport exceptions become CloudError, the cloud's reason kept."""
    try:
        yield
    except CloudError:
        raise
    except EgressRefused as refused:
        raise CloudError(refused.message, retryable=False, code="Egress") from refused
    except api_exceptions.GoogleAPICallError as error:
        status = int(error.code or 0)
        if not _json_reply(error.response):  # its message would quote the reply as it came
            raise CloudError(NOT_GOOGLE, retryable=False, code="NotGoogle") from error
        # Compute's errors carry their reason in the body's errors, not as ErrorInfo.
        details = [item for item in (error.errors or []) if isinstance(item, dict)]
        reason = error.reason or (details[0].get("reason") if details else None)
        reason = reason or type(error).__name__
        # The REST transport puts the method and URL before Google's own words.
        message = REQUEST_PREFIX.sub("", str(error.message))
        if status == 401:
            message = f"Google refused the service account key: {message}"
        retryable = status in RETRYABLE_STATUS or reason in RETRYABLE_REASONS
        raise CloudError(message, retryable=retryable, code=str(reason)) from error
    except auth_exceptions.RefreshError as error:
        raise CloudError(
            f"Google refused the service account key: {error}", code="RefreshError"
        ) from error
    except (auth_exceptions.TransportError, requests.RequestException) as error:
        raise CloudError(f"Could not reach Google Cloud: {error}", retryable=True) from error


mapped = mapped_with(mapped_errors)  # the decorator of the cloud's step methods


def not_found(call: Callable[[], Any]) -> Any:
    """The call's answer, or None when the resource does not exist."""
    try:
        return call()
    except api_exceptions.NotFound:
        return None


def exists_already(call: Callable[[], Any]) -> Any:
    """Make a resource; None when it exists already (an earlier attempt made it)."""
    try:
        return call()
    except api_exceptions.Conflict:
        return None


def short(url: str) -> str:
    """The last segment of a resource URL: ".../zones/us-central1-a" → "us-central1-a"."""
    return url.rstrip("/").rsplit("/", 1)[-1]


# ---- operations -----------------------------------------------------------------------------
def wait_operation(
    account: CloudAccount,
    project: str,
    operation: Any,
    *,
    heartbeat: Callable[[], None],
    timeout: float,
) -> None:
    """Wait until the operation is DONE; raise its error as CloudError."""
    deadline = time.monotonic() + timeout
    while operation is not None and operation.status != OPERATION_DONE:
        if time.monotonic() > deadline:
            raise CloudError(
                f"Timed out after {int(timeout)} s waiting for {operation.operation_type} of "
                f"{short(operation.target_link)}.",
                retryable=True,
            )
        heartbeat()
        if operation.zone:
            operation = client_for(account, compute_v1.ZoneOperationsClient).wait(
                project=project, zone=short(operation.zone), operation=operation.name
            )
        elif operation.region:
            operation = client_for(account, compute_v1.RegionOperationsClient).wait(
                project=project, region=short(operation.region), operation=operation.name
            )
        else:
            operation = client_for(account, compute_v1.GlobalOperationsClient).wait(
                project=project, operation=operation.name
            )
    if operation is not None and operation.error and operation.error.errors:
        errors = list(operation.error.errors)
        codes = {error.code for error in errors}
        raise CloudError(
            "; ".join(error.message for error in errors),
            retryable=bool(codes & RETRYABLE_OPERATION_CODES),
            code=errors[0].code,
        )
