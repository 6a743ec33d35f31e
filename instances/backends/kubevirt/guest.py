"""What the guest agent of a KubeVirt machine reports, read as KubeVirt serves it: the VMI's
AgentConnected condition and status.interfaces (the domain's interfaces merged with the
agent's), and virt-api's guestosinfo and filesystemlist subresources."""

import json
from typing import Any

from kubernetes import client

from instances.backends.base import BackendError, GuestFacts, GuestInterface
from instances.backends.kubevirt.connection import TIMEOUT, refusal
from instances.backends.kubevirt.objects import NamespaceObjects

Body = dict[str, Any]
NOT_CONNECTED = (
    "The guest agent is not connected: qemu-guest-agent is not running in the guest (yet), "
    "so KubeVirt has no guest report for it."
)


def agent_connected(vmi: Body) -> bool:
    return any(
        condition.get("type") == "AgentConnected" and condition.get("status") == "True"
        for condition in vmi.get("status", {}).get("conditions", [])
    )


def read_subresource(objects: NamespaceObjects, name: str, what: str) -> Body:
    """GET a VMI's subresource (guestosinfo, filesystemlist, userlist): the typed client has
    none for subresources.kubevirt.io, so the request is built with the client's own parts."""
    api = objects.api
    path = (
        f"/apis/subresources.kubevirt.io/v1/namespaces/{objects.namespace}/"
        f"virtualmachineinstances/{name}/{what}"
    )
    try:
        method, url, headers, _, _ = api.param_serialize(
            "GET", path, header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )  # fmt: skip
        response = api.call_api(method, url, header_params=headers, _request_timeout=TIMEOUT)
        response.read()
        if not 200 <= response.status < 300:
            raise client.ApiException(http_resp=response)
        answer = json.loads(response.data or b"{}")
    except client.ApiException as error:
        if error.status == 409:  # virt-api: the agent is not connected, or the VMI not running
            raise BackendError(NOT_CONNECTED, retryable=True) from None
        raise refusal(error, api.configuration.host) from None
    except ValueError:
        raise BackendError(f"The cluster sent an unreadable {what}.") from None
    except Exception as error:
        raise refusal(error, api.configuration.host) from None
    if not isinstance(answer, dict):
        raise BackendError(f"The cluster sent an unreadable {what}.")
    return answer


def guest_facts(objects: NamespaceObjects, machine_id: str) -> GuestFacts:
    """The guest's hostname, OS, interfaces and filesystems; a BackendError that says so while
    the machine does not run or its agent is not connected (asked again at the next poll)."""
    vmi = objects.virtual_machine_instance(machine_id)
    if vmi is None or vmi.get("status", {}).get("phase") != "Running":
        raise BackendError(f"{machine_id} is not running on the cluster.")
    if not agent_connected(vmi):
        raise BackendError(NOT_CONNECTED, retryable=True)
    info = read_subresource(objects, machine_id, "guestosinfo")
    filesystems = read_subresource(objects, machine_id, "filesystemlist").get("items") or []
    os_info = info.get("os") or {}
    try:
        return GuestFacts(
            hostname=str(info.get("hostname", "")),
            os=str(os_info.get("prettyName") or os_info.get("name") or ""),
            interfaces=tuple(
                _interface(item)
                for item in vmi["status"].get("interfaces", [])
                if "guest-agent" in str(item.get("infoSource", ""))
            ),
            filesystems=tuple(
                {
                    "mountpoint": item.get("mountPoint", ""),
                    "type": item.get("fileSystemType", ""),
                    "device": item.get("diskName", ""),
                    "total_bytes": item.get("totalBytes"),
                    "used_bytes": item.get("usedBytes"),
                }
                for item in filesystems
            ),
        )
    except (AttributeError, TypeError) as error:
        raise BackendError("The cluster sent an unreadable guest report.") from error


def _interface(item: Body) -> GuestInterface:
    """One of status.interfaces; its carrier is the link KubeVirt set on the domain."""
    return GuestInterface(
        name=str(item.get("interfaceName") or item.get("name") or ""),
        mac=str(item.get("mac", "")),
        addresses=tuple(str(address) for address in item.get("ipAddresses") or []),
        carrier={"up": True, "down": False}.get(str(item.get("linkState", ""))),
    )
