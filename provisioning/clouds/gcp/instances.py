"""One GCE VM of a job, for the `gcp` compute backend: read it, start it, stop it, reset it."""

from typing import Any

from google.cloud import compute_v1

from provisioning.clouds.gcp.base import project_of
from provisioning.clouds.gcp.sdk import client_for, not_found, short, wait_operation
from provisioning.models import CloudAccount

# GCE's states → the words the console uses for a VM (those of EC2).
VM_STATES = {
    "PROVISIONING": "pending",
    "STAGING": "pending",
    "RUNNING": "running",
    "STOPPING": "stopping",
    "SUSPENDING": "stopping",
    "SUSPENDED": "stopped",
    "TERMINATED": "stopped",
    "REPAIRING": "pending",
}
POWER_TIMEOUT = 120


def describe(instance: compute_v1.Instance) -> dict[str, str]:
    """An instance in the console's words (the keys AWS's describe_vms has)."""
    interfaces = list(instance.network_interfaces)
    return {
        "instance_id": instance.name,
        "state": VM_STATES.get(instance.status, instance.status.lower()),
        "private_ip": str(interfaces[0].network_i_p) if interfaces else "",
        "zone": short(instance.zone),
        "instance_type": short(instance.machine_type),
        "public_ip": "",
        "reason": instance.status_message,
    }


def read_vm(account: CloudAccount, zone: str, name: str) -> dict[str, str] | None:
    """The VM now, or None when GCE no longer knows it (SDK errors are the caller's to map)."""
    instances = client_for(account, compute_v1.InstancesClient)
    found = not_found(lambda: instances.get(project=project_of(account), zone=zone, instance=name))
    return describe(found) if found is not None else None


def list_vms(account: CloudAccount) -> list[dict[str, str]]:
    """Every VM of the account's project, in all zones: one aggregatedList (paged by the SDK)
    in place of one read per VM. A zone that does not answer fails the call."""
    instances = client_for(account, compute_v1.InstancesClient)
    request = compute_v1.AggregatedListInstancesRequest(
        project=project_of(account), max_results=500
    )
    return [
        describe(instance)
        for _scope, scoped in instances.aggregated_list(request=request)
        for instance in scoped.instances
    ]


def power_vm(account: CloudAccount, zone: str, name: str, operation: str) -> None:
    """start; stop (ACPI, then GCE powers off after its grace period); force_stop (no
    graceful shutdown); reboot (a reset: GCE has no soft reboot). Returns once GCE is done."""
    instances = client_for(account, compute_v1.InstancesClient)
    where: dict[str, Any] = {"project": project_of(account), "zone": zone, "instance": name}
    if operation == "start":
        started = instances.start_unary(compute_v1.StartInstanceRequest(**where))
    elif operation in ("stop", "force_stop"):
        graceless = operation == "force_stop"
        started = instances.stop_unary(
            compute_v1.StopInstanceRequest(**where, no_graceful_shutdown=graceless)
        )
    else:
        started = instances.reset_unary(compute_v1.ResetInstanceRequest(**where))
    wait_operation(
        account, project_of(account), started, heartbeat=lambda: None, timeout=POWER_TIMEOUT
    )


def serial_output(account: CloudAccount, zone: str, name: str, start: int) -> dict[str, Any]:
    """Port 1's output from byte `start` (GCE keeps the last MiB): contents, start, next."""
    instances = client_for(account, compute_v1.InstancesClient)
    found = instances.get_serial_port_output(
        compute_v1.GetSerialPortOutputInstanceRequest(
            project=project_of(account), zone=zone, instance=name, port=1, start=start
        )
    )
    return {"contents": found.contents, "start": int(found.start), "next": int(found.next_)}
