"""The guest agent as virt-handler relays it: the VMI's AgentConnected condition, its
status.guestOSInfo and status.interfaces (the domain's interfaces merged with what the agent
reports), and virt-api's guestosinfo, filesystemlist and userlist subresources, each answered by
asking the qemu-ga of the real QEMU guest that runs the VMI on its node."""

import time
from typing import Any

from instances.backends.base import BackendError
from instances.backends.qemu import QemuBackend
from instances.backends.qemu.agent import GuestAgent
from tests.fakes.kubevirt.store import BY_KIND, ApiError, Body

VMI = BY_KIND["VirtualMachineInstance"]
POLL_SECONDS = 2.0  # how often a running VMI's agent data is refreshed in its status
CAPPED = 10  # guestosinfo caps its filesystems and users (the user guide says so)
AGENT_TIMEOUT = 3.0
NOT_CONNECTED = "VMI does not have guest agent connected"


def _os_info(reply: Body) -> Body:
    """qemu-ga's guest-get-osinfo as v1.VirtualMachineInstanceGuestOSInfo."""
    names = {
        "id": "id", "kernel-release": "kernelRelease", "kernel-version": "kernelVersion",
        "machine": "machine", "name": "name", "pretty-name": "prettyName",
        "version": "version", "version-id": "versionId",
    }  # fmt: skip
    return {ours: str(reply[theirs]) for theirs, ours in names.items() if theirs in reply}


def _filesystems(reply: list[Body]) -> list[Body]:
    """qemu-ga's guest-get-fsinfo as v1.VirtualMachineInstanceFileSystem items."""
    found = []
    for entry in reply:
        item: Body = {
            "diskName": entry.get("name", ""), "mountPoint": entry.get("mountpoint", ""),
            "fileSystemType": entry.get("type", ""), "usedBytes": entry.get("used-bytes", 0),
            "totalBytes": entry.get("total-bytes", 0),
        }  # fmt: skip
        disks = [
            {"busType": disk.get("bus-type", ""), **({"serial": disk["serial"]} if disk.get("serial") else {})}
            for disk in entry.get("disk", [])
        ]  # fmt: skip
        if disks:
            item["disk"] = disks
        found.append(item)
    return found


def _users(reply: list[Body]) -> list[Body]:
    """qemu-ga's guest-get-users as v1.VirtualMachineInstanceGuestOSUser items."""
    return [
        {
            "userName": entry["user"],
            **({"domain": entry["domain"]} if entry.get("domain") else {}),
            **({"loginTime": float(entry["login-time"])} if "login-time" in entry else {}),
        }
        for entry in reply
    ]


class AgentRelay:
    """What virt-handler learns from each running VMI's guest agent, and virt-api serves."""

    def __init__(self, controller: Any) -> None:
        self.controller = controller
        self.polled: dict[tuple[str, str], float] = {}
        actions = controller.api.actions
        actions[("virtualmachineinstances", "guestosinfo")] = self.guest_os_info
        actions[("virtualmachineinstances", "filesystemlist")] = self.filesystem_list
        actions[("virtualmachineinstances", "userlist")] = self.user_list

    # ---- the node's guest ------------------------------------------------------------------
    def _guest(self, vmi: Body) -> tuple[QemuBackend, str]:
        node = vmi.get("status", {}).get("nodeName")
        if vmi.get("status", {}).get("phase") != "Running" or not node:
            raise ApiError(409, "Conflict", "VMI is not running")
        return self.controller.node_backend(node), self.controller._machine_id(vmi)

    @staticmethod
    def _agent(backend: QemuBackend, machine_id: str) -> GuestAgent | None:
        """The guest's agent while qemu-ga has its port open; None while it does not."""
        run = backend._run_folder(machine_id)
        try:
            if not backend._agent_listening(run):
                return None
        except BackendError:
            return None
        return GuestAgent(run.agent_socket, timeout=AGENT_TIMEOUT)

    def _connected(self, namespace: str, name: str) -> GuestAgent:
        vmi = self.controller.store.get(VMI, namespace, name)
        backend, machine_id = self._guest(vmi)
        connected = any(
            condition.get("type") == "AgentConnected" and condition.get("status") == "True"
            for condition in vmi.get("status", {}).get("conditions", [])
        )
        agent = self._agent(backend, machine_id) if connected else None
        if agent is None:
            raise ApiError(409, "Conflict", NOT_CONNECTED)
        return agent

    @staticmethod
    def _ask(agent: GuestAgent, command: str, default: Any) -> Any:
        try:
            return agent.call(command)
        except BackendError:
            return default

    # ---- virt-api's subresources -----------------------------------------------------------
    def guest_os_info(self, namespace: str, name: str, body: Body) -> Body:
        """v1.VirtualMachineInstanceGuestAgentInfo."""
        agent = self._connected(namespace, name)
        info = self._ask(agent, "guest-info", {})
        zone = self._ask(agent, "guest-get-timezone", {})
        answer: Body = {
            "guestAgentVersion": str(info.get("version", "")),
            "hostname": self._ask(agent, "guest-get-host-name", {}).get("host-name", ""),
            "os": _os_info(self._ask(agent, "guest-get-osinfo", {})),
            "timezone": f"{zone.get('zone', 'UTC')}, {zone.get('offset', 0)}",
            "fsInfo": {"disks": _filesystems(self._ask(agent, "guest-get-fsinfo", []))[:CAPPED]},
            "userList": _users(self._ask(agent, "guest-get-users", []))[:CAPPED],
            "supportedCommands": [
                {"name": command["name"], "enabled": bool(command.get("enabled"))}
                for command in info.get("supported_commands", [])
            ],
        }
        return answer

    def filesystem_list(self, namespace: str, name: str, body: Body) -> Body:
        """v1.VirtualMachineInstanceFileSystemList: every filesystem, uncapped."""
        agent = self._connected(namespace, name)
        return {"items": _filesystems(self._ask(agent, "guest-get-fsinfo", [])), "metadata": {}}

    def user_list(self, namespace: str, name: str, body: Body) -> Body:
        """v1.VirtualMachineInstanceGuestOSUserList."""
        agent = self._connected(namespace, name)
        return {"items": _users(self._ask(agent, "guest-get-users", [])), "metadata": {}}

    # ---- the VMI's status ------------------------------------------------------------------
    def refresh(self, vmi: Body, status: Body, *, fresh: bool = False) -> None:
        """Bring a running VMI's agent data in `status` up to date, every POLL_SECONDS (at once
        when `fresh`: its links changed): the AgentConnected condition, guestOSInfo and the
        merged interfaces with their linkState."""
        key = (vmi["metadata"]["namespace"], vmi["metadata"]["name"])
        if not fresh and time.monotonic() - self.polled.get(key, 0.0) < POLL_SECONDS:
            return
        self.polled[key] = time.monotonic()
        backend, machine_id = (
            self.controller.node_backend(status["nodeName"]),
            (self.controller._machine_id(vmi)),
        )
        links = backend.status(machine_id).links
        agent = self._agent(backend, machine_id)
        reported: list[Body] = []
        conditions = [c for c in status.get("conditions", []) if c["type"] != "AgentConnected"]
        if agent is not None:
            reported = self._ask(agent, "guest-network-get-interfaces", None)
        if agent is not None and reported is not None:
            conditions.append({"type": "AgentConnected", "status": "True"})
            status["guestOSInfo"] = _os_info(self._ask(agent, "guest-get-osinfo", {}))
        else:
            reported = []
            status.pop("guestOSInfo", None)
        status["conditions"] = conditions
        status["interfaces"] = _interfaces(vmi, reported, links)


def _interfaces(vmi: Body, reported: list[Body], links: dict[str, bool]) -> list[Body]:
    """The domain's interfaces merged with the agent's by MAC, as virt-handler merges them."""
    by_mac = {
        str(entry.get("hardware-address", "")).lower(): entry
        for entry in reported
        if entry.get("name") != "lo"
    }
    merged = []
    for interface in vmi["spec"]["domain"]["devices"].get("interfaces", []):
        mac = interface.get("macAddress", "").lower()
        item: Body = {"name": interface["name"], "mac": mac, "infoSource": "domain"}
        if interface["name"] in links:
            item["linkState"] = "up" if links[interface["name"]] else "down"
        if (entry := by_mac.pop(mac, None)) is not None:
            item.update(_from_agent(entry), infoSource="domain, guest-agent")
        merged.append(item)
    for entry in by_mac.values():  # the guest's own (a bridge, a tunnel)
        merged.append({**_from_agent(entry), "infoSource": "guest-agent"})
    return merged


def _from_agent(entry: Body) -> Body:
    addresses = [
        f"{address['ip-address']}/{address['prefix']}" for address in entry.get("ip-addresses", [])
    ]
    item: Body = {"interfaceName": entry.get("name", ""), "ipAddresses": addresses}
    if entry.get("hardware-address"):
        item["mac"] = entry["hardware-address"]
    if addresses:
        item["ipAddress"] = addresses[0]
    return item
