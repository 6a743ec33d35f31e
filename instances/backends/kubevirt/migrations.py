"""Live migration on KubeVirt: a VirtualMachineInstanceMigration (VMIM) for the machine's VMI,
followed through a watch until KubeVirt says it Succeeded or Failed. KubeVirt admits it only
for a running VMI with no migration in flight, and picks the target node itself."""

import math
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch

from instances.backends.base import BackendError, MigrationReport
from instances.backends.kubevirt.connection import TIMEOUT, refusal
from instances.backends.kubevirt.manifests import MACHINE_LABEL, MANAGED_BY
from instances.backends.kubevirt.objects import KUBEVIRT, NamespaceObjects

Body = dict[str, Any]
PLURAL = "virtualmachineinstancemigrations"
MIGRATE_TIMEOUT = 900.0  # KubeVirt's own timeouts end a stuck migration before this


def migration_body(machine_id: str) -> Body:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {
            "generateName": f"{machine_id}-migration-",
            "labels": {**MANAGED_BY, MACHINE_LABEL: machine_id},
        },
        "spec": {"vmiName": machine_id},
    }


def migrate(
    objects: NamespaceObjects,
    machine_id: str,
    on_progress: Callable[[MigrationReport], None],
    timeout: float = MIGRATE_TIMEOUT,
) -> MigrationReport:
    """Ask KubeVirt to move the VMI and report each phase; the Succeeded report, whose target
    is the node the VMI runs on now. A failure raises, the VMI running where it was."""
    host = objects.api.configuration.host
    vmi = objects.virtual_machine_instance(machine_id)
    source = (vmi or {}).get("status", {}).get("nodeName", "")
    try:
        made = objects.custom.create_namespaced_custom_object(
            *KUBEVIRT, objects.namespace, PLURAL, migration_body(machine_id),
            field_validation="Strict", _request_timeout=TIMEOUT,
        )  # fmt: skip
    except Exception as error:
        raise _refused(refusal(error, host)) from None
    assert isinstance(made, dict)
    name = made["metadata"]["name"]
    report = MigrationReport("Pending", source)
    on_progress(report)
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        for migration in _watch(objects, name, left):
            if migration is None:
                raise BackendError(f"The migration {name} was deleted: {machine_id} stays on "
                                   f"{source or 'its node'}.")  # fmt: skip
            status = migration.get("status", {})
            state = status.get("migrationState", {})
            seen = MigrationReport(
                status.get("phase") or "Pending", state.get("sourceNode") or source,
                state.get("targetNode", ""), state.get("failureReason", ""),
            )  # fmt: skip
            if seen != report:
                report = seen
                on_progress(report)
            if report.phase == "Failed":
                reason = report.message or "KubeVirt gives no reason"
                raise BackendError(
                    f"The migration failed: {reason}. It runs on {report.source or 'its node'}."
                )
            if report.phase == "Succeeded":
                return report
    _delete(objects, name)  # KubeVirt aborts a migration whose object goes
    raise BackendError(f"The migration did not finish within {timeout:.0f} s and was called off.")


def _refused(error: BackendError) -> BackendError:
    """KubeVirt's webhook says why it will not migrate (not running, one in flight)."""
    return BackendError(
        error.message.replace(
            'The cluster answered 400: admission webhook "migration-create-validator.kubevirt.io"'
            " denied the request: ",
            "KubeVirt refused the migration: ",
        ),
        retryable=error.retryable,
    )


def _watch(objects: NamespaceObjects, name: str, timeout: float) -> Any:
    """The VMIM now and at each change (None once deleted), until `timeout` passes."""
    stream = watch.Watch().stream(
        objects.custom.list_namespaced_custom_object, *KUBEVIRT, objects.namespace, PLURAL,
        field_selector=f"metadata.name={name}", timeout_seconds=max(1, math.ceil(timeout)),
    )  # fmt: skip
    try:
        for event in stream:
            if event["type"] == "DELETED":
                yield None
            elif event["type"] in ("ADDED", "MODIFIED"):
                yield event["object"]
    except client.ApiException as error:
        raise refusal(error, objects.api.configuration.host) from None


def _delete(objects: NamespaceObjects, name: str) -> None:
    try:
        objects.custom.delete_namespaced_custom_object(
            *KUBEVIRT, objects.namespace, PLURAL, name, _request_timeout=TIMEOUT
        )
    except Exception as error:
        raise refusal(error, objects.api.configuration.host) from None
