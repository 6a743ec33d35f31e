"""Writing a machine's objects to its project's namespace, idempotently: the namespace and the
binding that gives the console its Secrets, the subnets' NetworkAttachmentDefinitions, the
VirtualMachine (strict field validation, so a field the cluster does not know is an error, not
dropped) and its seed Secret, owned by the VM so that deleting the VM takes it along."""

from collections.abc import Callable
from typing import Any

from kubernetes import client

from instances.backends.base import DiskSpec, MachineSpec
from instances.backends.kubevirt import manifests
from instances.backends.kubevirt.connection import TIMEOUT, refusal
from instances.backends.kubevirt.manifests import Placement

Body = dict[str, Any]
KUBEVIRT = ("kubevirt.io", "v1")
MULTUS = ("k8s.cni.cncf.io", "v1")


class NamespaceObjects:
    """One namespace of one cluster, as the KubeVirt backend writes to it."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.rbac = client.RbacAuthorizationV1Api(api)

    def _calling(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The call's answer; its refusal as a BackendError (404 and 409 come back as None
        and False for the callers that expect them)."""
        try:
            return call(*args, _request_timeout=TIMEOUT, **kwargs)
        except client.ApiException as error:
            if error.status in (404, 409):
                return error.status
            raise refusal(error, self.api.configuration.host) from None
        except Exception as error:
            raise refusal(error, self.api.configuration.host) from None

    def ensure_namespace(self) -> None:
        if self._calling(self.core.read_namespace, self.namespace) == 404:
            body = {"metadata": {"name": self.namespace, "labels": dict(manifests.MANAGED_BY)}}
            self._calling(self.core.create_namespace, body)  # 409: made meanwhile
        self.ensure_secrets_access()

    def ensure_secrets_access(self) -> None:
        """Binds the console's Secrets role in its namespace (409: bound already). A role from
        an older rbac.yaml may not bind (403): its Secrets rule then says for itself."""
        create: Callable[..., Any] = self.rbac.create_namespaced_role_binding  # takes a dict
        try:
            create(
                self.namespace, manifests.secrets_binding(self.namespace), _request_timeout=TIMEOUT
            )
        except client.ApiException as error:
            if error.status not in (403, 409):
                raise refusal(error, self.api.configuration.host) from None
        except Exception as error:
            raise refusal(error, self.api.configuration.host) from None

    def ensure_networks(self, spec: MachineSpec) -> dict[str, str]:
        """A NetworkAttachmentDefinition per subnet segment the machine joins; segment → name."""
        segments = sorted({nic.network for nic in spec.nics if nic.network})
        for segment in segments:
            body = manifests.network_attachment(segment, self.namespace)
            self._calling(
                self.custom.create_namespaced_custom_object, *MULTUS, self.namespace,
                "network-attachment-definitions", body, field_validation="Strict",
            )  # fmt: skip
        return {segment: segment for segment in segments}

    def _put(self, plural: str, body: Body) -> Body:
        """Creates the VirtualMachine, or replaces the one there (at its current version)."""
        name = body["metadata"]["name"]
        made = self._calling(
            self.custom.create_namespaced_custom_object, *KUBEVIRT, self.namespace, plural, body,
            field_validation="Strict",
        )  # fmt: skip
        for _ in range(3):
            if made != 409:
                return made
            current = self._calling(
                self.custom.get_namespaced_custom_object, *KUBEVIRT, self.namespace, plural, name
            )
            if current == 404:  # deleted meanwhile: make it again
                made = self._calling(
                    self.custom.create_namespaced_custom_object, *KUBEVIRT, self.namespace,
                    plural, body, field_validation="Strict",
                )  # fmt: skip
                continue
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            made = self._calling(
                self.custom.replace_namespaced_custom_object, *KUBEVIRT, self.namespace, plural,
                name, body, field_validation="Strict",
            )  # fmt: skip
        raise refusal(RuntimeError(f"{name} kept changing while it was written"), "")

    def _put_secret(self, body: Body, owner: Body) -> None:
        body["metadata"]["ownerReferences"] = [{
            "apiVersion": manifests.API_VERSION, "kind": "VirtualMachine",
            "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
        }]  # fmt: skip
        name = body["metadata"]["name"]
        if self._calling(self.core.create_namespaced_secret, self.namespace, body) == 409:
            self._calling(self.core.replace_namespaced_secret, name, self.namespace, body)

    def define(
        self,
        spec: MachineSpec,
        placement: Placement,
        image_url: Callable[[DiskSpec], str],
    ) -> Body:
        """Everything the machine runs from, made or brought up to date; the VirtualMachine."""
        self.ensure_namespace()
        networks = self.ensure_networks(spec)
        body = manifests.virtual_machine(spec, placement, networks=networks, image_url=image_url)
        vm = self._put("virtualmachines", body)
        if (secret := manifests.seed_secret(spec, self.namespace)) is not None:
            self._put_secret(secret, vm)
        for pull in manifests.pull_secrets(spec, self.namespace):
            self._put_secret(pull, vm)
        return vm

    def virtual_machine(self, machine_id: str) -> Body | None:
        found = self._calling(
            self.custom.get_namespaced_custom_object, *KUBEVIRT, self.namespace,
            "virtualmachines", machine_id,
        )  # fmt: skip
        return None if found == 404 else found

    def virtual_machine_instance(self, machine_id: str) -> Body | None:
        found = self._calling(
            self.custom.get_namespaced_custom_object, *KUBEVIRT, self.namespace,
            "virtualmachineinstances", machine_id,
        )  # fmt: skip
        return None if found == 404 else found

    def delete_instance(self, machine_id: str) -> None:
        """Deletes the VirtualMachineInstance (a finished run); one already gone is fine."""
        self._calling(
            self.custom.delete_namespaced_custom_object, *KUBEVIRT, self.namespace,
            "virtualmachineinstances", machine_id,
        )  # fmt: skip

    def undefine(self, machine_id: str) -> None:
        """Deletes the VirtualMachine; the cluster's garbage collector takes what it owns (its
        instance, seed Secret and DataVolumes). One already gone is fine."""
        self._calling(
            self.custom.delete_namespaced_custom_object, *KUBEVIRT, self.namespace,
            "virtualmachines", machine_id,
        )  # fmt: skip
