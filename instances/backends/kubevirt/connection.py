"""Signing in to a cluster's API server with the official client, and its refusals in words a
console user can act on: an API server that does not answer, a token it no longer takes, and
the RBAC rule the console's service account lacks (deploy/kubevirt/rbac.yaml grants them all)."""

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import urllib3
from kubernetes import client
from kubernetes.utils.quantity import parse_quantity

from instances.backends.base import BackendError, RemoteConsole

TIMEOUT = (3.05, 15)  # connect, read: seconds
ZONE_LABEL = "topology.kubernetes.io/zone"
RBAC_FILE = "deploy/kubevirt/rbac.yaml"
USER_AGENT = "zopday-console"
CONSOLE_SUBPROTOCOL = "plain.kubevirt.io"  # raw bytes in binary frames, both ways


@dataclass(frozen=True)
class ClusterAccess:
    """What signing in takes: the API server, its CA (PEM, "" for the system's) and a token."""

    api_url: str
    token: str
    ca_certificate: str = ""


def api_client(access: ClusterAccess, ca_folder: Path) -> client.ApiClient:
    """A client for the cluster; the client reads a CA from a file, kept in `ca_folder`."""
    configuration = client.Configuration(host=access.api_url.rstrip("/"))
    configuration.api_key = {"authorization": access.token}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    configuration.retries = False  # a refusal is answered at once, not retried in the client
    if access.ca_certificate:
        configuration.ssl_ca_cert = ca_file(access, ca_folder)
    api = client.ApiClient(configuration)
    api.user_agent = USER_AGENT  # what the cluster's audit log names as the caller
    return api


def ca_file(access: ClusterAccess, ca_folder: Path) -> str:
    """The cluster's CA as a file (the client and TLS contexts read files); "" for the system's."""
    if not access.ca_certificate:
        return ""
    digest = hashlib.sha256(access.ca_certificate.encode()).hexdigest()[:16]
    ca_folder.mkdir(parents=True, exist_ok=True)
    path = ca_folder / f"ca-{digest}.pem"
    if not path.exists():
        path.write_text(access.ca_certificate)
    return str(path)


def console_endpoint(
    access: ClusterAccess, ca_folder: Path, namespace: str, name: str, subresource: str
) -> RemoteConsole:
    """The websocket of a VMI's `console` (serial) or `vnc` subresource, as virtctl opens it."""
    base = access.api_url.rstrip("/")
    scheme, _, rest = base.partition("://")
    path = (
        f"/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances/"
        f"{name}/{subresource}"
    )
    return RemoteConsole(
        url=f"{'wss' if scheme == 'https' else 'ws'}://{rest}{path}",
        subprotocol=CONSOLE_SUBPROTOCOL,
        headers=(("Authorization", f"Bearer {access.token}"),),
        ca_file=ca_file(access, ca_folder),
    )


def refusal(error: Exception, api_url: str) -> BackendError:
    """What the cluster's answer (or its silence) means for the user."""
    if isinstance(error, urllib3.exceptions.HTTPError):
        return BackendError(
            f"The cluster's API server at {api_url} does not answer ({type(error).__name__}); "
            "check its address and that the console can reach it.",
            retryable=True,
        )
    if not isinstance(error, client.ApiException):
        return BackendError(f"The cluster's API failed: {error}")
    status = _status(error)
    message = str(status.get("message") or error.reason or "")
    if error.status == 401:
        return BackendError(
            "The cluster refused the console's token (expired or revoked): give the cluster a "
            "new service account token in the admin."
        )
    if error.status == 403:
        return BackendError(
            f"The console's service account lacks an RBAC rule: {message}. Apply {RBAC_FILE} "
            "to the cluster, or add that rule to its role."
        )
    if error.status == 422:
        causes = status.get("details", {}).get("causes", [])
        listed = "; ".join(f"{c.get('field', '')}: {c.get('message', '')}" for c in causes)
        return BackendError(f"The cluster refused the object: {listed or message}")
    return BackendError(
        f"The cluster answered {error.status}: {message}", retryable=error.status >= 500
    )


def _status(error: client.ApiException) -> dict:
    try:
        body = json.loads(error.body or "{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def cluster_zones(api: client.ApiClient) -> dict[str, dict[str, int]]:
    """Each zone its nodes are labelled with, and the most one node there can give a machine
    (memory in MiB, CPUs); and proof that KubeVirt serves: its VirtualMachines can be listed.
    Raises the call's refusal."""
    nodes = client.CoreV1Api(api).list_node(_request_timeout=TIMEOUT)
    client.CustomObjectsApi(api).list_cluster_custom_object(
        "kubevirt.io", "v1", "virtualmachines", limit=1, _request_timeout=TIMEOUT
    )
    zones: dict[str, dict[str, int]] = {}
    for node in nodes.items:
        zone = ((node.metadata.labels if node.metadata else None) or {}).get(ZONE_LABEL)
        if not zone:
            continue
        allocatable = (node.status.allocatable if node.status else None) or {}
        memory_mb = int(parse_quantity(allocatable.get("memory", "0")) // (1024 * 1024))
        cpus = int(parse_quantity(allocatable.get("cpu", "0")))
        most = zones.setdefault(zone, {"memory_mb": 0, "cpus": 0})
        most["memory_mb"], most["cpus"] = max(most["memory_mb"], memory_mb), max(most["cpus"], cpus)
    return dict(sorted(zones.items()))


def subresource(
    api: client.ApiClient, namespace: str, plural: str, name: str, action: str, body: dict
) -> None:
    """PUT a KubeVirt action (start, stop, restart, softreboot...): the typed client has no
    method for subresources.kubevirt.io, so the request is built with the client's own parts.
    Raises ApiException as the typed calls do."""
    path = f"/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/{plural}/{name}/{action}"
    method, url, headers, data, _ = api.param_serialize(
        "PUT", path, header_params={"Content-Type": "application/json"}, body=body,
        auth_settings=["BearerToken"],
    )  # fmt: skip
    response = api.call_api(method, url, header_params=headers, body=data, _request_timeout=TIMEOUT)
    response.read()
    if not 200 <= response.status < 300:
        raise client.ApiException(http_resp=response)
