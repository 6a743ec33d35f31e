"""The KubeVirt fake answers as a Kubernetes API server does where the backend depends on it:
validation (422, strict 400, pruning), resourceVersion and 409 on a stale write, 404, watches
with bookmarks and 410 Gone, and RBAC refusals that name the missing rule."""

import json

import pytest
from kubernetes import client, watch

from tests.fakes.kubevirt.fixtures import api_client
from tests.fakes.kubevirt.server import Subject

VMS = ("kubevirt.io", "v1", "zop-p1", "virtualmachines")


def vm(name: str = "i-1", **spec) -> dict:
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": name},
        "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}}
        | spec,
    }  # fmt: skip


def refusal(call, *args, **kwargs) -> tuple[int, dict]:
    with pytest.raises(client.ApiException) as raised:
        call(*args, **kwargs)
    return raised.value.status, json.loads(raised.value.body)


def test_an_object_is_stored_with_its_version_and_a_stale_write_is_a_conflict(custom):
    made = custom.create_namespaced_custom_object(*VMS, vm())
    assert made["metadata"]["namespace"] == "zop-p1" and made["metadata"]["generation"] == 1
    made["spec"]["runStrategy"] = "Always"
    updated = custom.replace_namespaced_custom_object(*VMS, "i-1", made)
    assert int(updated["metadata"]["resourceVersion"]) > int(made["metadata"]["resourceVersion"])
    assert updated["metadata"]["generation"] == 2
    code, status = refusal(custom.replace_namespaced_custom_object, *VMS, "i-1", made)
    assert (code, status["reason"]) == (409, "Conflict")
    patched = custom.patch_namespaced_custom_object(
        *VMS, "i-1", {"spec": {"runStrategy": "Manual"}}
    )
    assert patched["spec"]["runStrategy"] == "Manual"
    code, status = refusal(custom.create_namespaced_custom_object, *VMS, vm())
    assert (code, status["reason"]) == (409, "AlreadyExists")


def test_a_missing_object_or_namespace_is_not_found(custom):
    code, status = refusal(custom.get_namespaced_custom_object, *VMS, "nope")
    assert (code, status["message"]) == (404, 'virtualmachines.kubevirt.io "nope" not found')
    code, status = refusal(
        custom.create_namespaced_custom_object,
        "kubevirt.io",
        "v1",
        "other",
        "virtualmachines",
        vm(),
    )
    assert (code, status["message"]) == (404, 'namespaces "other" not found')


def test_an_invalid_object_is_a_422_with_each_cause_at_its_field(custom):
    code, status = refusal(custom.create_namespaced_custom_object, *VMS, vm(runStrategy=1))
    assert (code, status["kind"], status["reason"]) == (422, "Status", "Invalid")
    assert [cause["field"] for cause in status["details"]["causes"]] == ["spec.runStrategy"]
    code, status = refusal(
        custom.create_namespaced_custom_object, *VMS, {"metadata": {"name": "x"}}
    )
    assert status["details"]["causes"][0] == {
        "reason": "FieldValueInvalid",
        "message": "Required value",
        "field": "spec",
    }
    assert custom.list_namespaced_custom_object(*VMS)["items"] == []


def test_an_unknown_field_is_refused_when_strict_and_pruned_otherwise(custom):
    stray = vm(template={"spec": {"domain": {"devices": {}, "cpuu": {}}}})
    code, status = refusal(
        custom.create_namespaced_custom_object, *VMS, stray, field_validation="Strict"
    )
    assert (code, status["message"]) == (
        400,
        'strict decoding error: unknown field "spec.template.spec.domain.cpuu"',
    )
    made = custom.create_namespaced_custom_object(*VMS, stray)
    assert "cpuu" not in made["spec"]["template"]["spec"]["domain"]


def test_a_watch_sends_changes_and_bookmarks_then_410_once_its_version_is_gone(kube_api, custom):
    made = custom.create_namespaced_custom_object(*VMS, vm())
    since = made["metadata"]["resourceVersion"]
    custom.patch_namespaced_custom_object(*VMS, "i-1", {"spec": {"runStrategy": "Always"}})
    seen = []
    for event in watch.Watch().stream(
        custom.list_namespaced_custom_object, *VMS, resource_version=since,
        allow_watch_bookmarks=True, timeout_seconds=5,
    ):  # fmt: skip
        seen.append(event["type"])
        if event["type"] == "BOOKMARK":
            break
    assert seen == ["MODIFIED", "BOOKMARK"]
    kube_api.store.compact()
    with pytest.raises(client.ApiException) as raised:
        for _ in watch.Watch().stream(
            custom.list_namespaced_custom_object, *VMS, resource_version=since, timeout_seconds=5
        ):
            pass
    assert raised.value.status == 410


def test_deleting_a_virtual_machine_takes_what_it_owns(custom):
    made = custom.create_namespaced_custom_object(*VMS, vm())
    owner = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "i-1",
             "uid": made["metadata"]["uid"]}  # fmt: skip
    vmi = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
           "metadata": {"name": "i-1", "ownerReferences": [owner]},
           "spec": {"domain": {"devices": {}}}}  # fmt: skip
    custom.create_namespaced_custom_object(
        "kubevirt.io", "v1", "zop-p1", "virtualmachineinstances", vmi
    )
    custom.delete_namespaced_custom_object(*VMS, "i-1")
    left = custom.list_namespaced_custom_object(
        "kubevirt.io", "v1", "zop-p1", "virtualmachineinstances"
    )
    assert left["items"] == []


def test_a_token_is_checked_and_a_missing_rbac_rule_is_named(kube_api, custom):
    custom.create_namespaced_custom_object(*VMS, vm())
    kube_api.add_token("viewer", Subject("viewer", rules=[({"get", "list"}, "kubevirt.io",
                                                          {"virtualmachines"})]))  # fmt: skip
    kube_api.add_token("expired", Subject("old", expires=0))
    viewer = client.CustomObjectsApi(api_client(kube_api, "viewer"))
    assert viewer.get_namespaced_custom_object(*VMS, "i-1")["metadata"]["name"] == "i-1"
    code, status = refusal(viewer.delete_namespaced_custom_object, *VMS, "i-1")
    assert (code, status["message"]) == (
        403,
        'virtualmachines.kubevirt.io "i-1" is forbidden: User "viewer" cannot delete resource '
        '"virtualmachines" in API group "kubevirt.io" in the namespace "zop-p1"',
    )
    for token in ("expired", "unknown"):
        other = client.CustomObjectsApi(api_client(kube_api, token))
        code, _ = refusal(other.get_namespaced_custom_object, *VMS, "i-1")
        assert code == 401


def test_secure_boot_is_on_by_default_under_efi_and_needs_smm(custom):
    efi = {"firmware": {"bootloader": {"efi": {}}}, "devices": {}}
    code, status = refusal(
        custom.create_namespaced_custom_object, *VMS, vm(template={"spec": {"domain": efi}})
    )
    field = "spec.template.spec.domain.firmware.bootloader.efi.secureBoot"
    assert (code, status["reason"]) == (422, "Invalid")
    assert status["details"]["causes"][0]["field"] == field
    assert "SecureBoot requires SMM" in status["message"]
    with_smm = {**efi, "features": {"smm": {}}}
    made = custom.create_namespaced_custom_object(*VMS, vm(template={"spec": {"domain": with_smm}}))
    made["spec"]["template"]["spec"]["domain"]["features"]["smm"] = {"enabled": False}
    code, status = refusal(custom.replace_namespaced_custom_object, *VMS, "i-1", made)
    assert (code, status["details"]["causes"][0]["field"]) == (422, field)
    off = {"firmware": {"bootloader": {"efi": {"secureBoot": False}}}, "devices": {}}
    custom.patch_namespaced_custom_object(
        *VMS, "i-1", {"spec": {"template": {"spec": {"domain": off}}}}
    )
