"""virt-api's validating webhook for VirtualMachines, on create and update: what the OpenAPI
document cannot say, such as Secure Boot (on by default under `efi`) needing SMM."""

from typing import Any

from tests.fakes.kubevirt.store import ApiError

Body = dict[str, Any]
WEBHOOK = "virtualmachine-validator.kubevirt.io"
SECURE_BOOT = "spec.template.spec.domain.firmware.bootloader.efi.secureBoot"


def admit_vm(namespace: str, body: Body) -> None:
    """Refuses, with a 422 naming the field, a VM whose template asks what KubeVirt cannot run."""
    domain = body.get("spec", {}).get("template", {}).get("spec", {}).get("domain", {})
    efi = domain.get("firmware", {}).get("bootloader", {}).get("efi")
    smm = domain.get("features", {}).get("smm")
    smm_on = smm is not None and smm.get("enabled", True)
    if efi is not None and efi.get("secureBoot", True) and not smm_on:
        message = "SecureBoot requires SMM, which is currently disabled."
        raise ApiError(
            422, "Invalid",
            f'admission webhook "{WEBHOOK}" denied the request: {SECURE_BOOT}: {message}',
            {"causes": [{"reason": "FieldValueInvalid", "message": message, "field": SECURE_BOOT}]},
        )  # fmt: skip
