"""UEFI firmware (OVMF): which code/vars pair a machine boots with, and its per-instance vars copy.

Debian's ovmf package ships the pairs; the 4M builds are the current ones. Secure Boot needs the
`.secboot` code (built with SMM, so QEMU needs `smm=on` and a secure pflash) and the `.ms` vars
template, which enrolls Microsoft's keys and turns Secure Boot on.
"""

import shutil
from dataclasses import dataclass
from pathlib import Path

from instances.backends.base import BackendError, FirmwareSpec

from .run_folder import RunFolder

OVMF_DIR = Path("/usr/share/OVMF")


@dataclass(frozen=True)
class Firmware:
    """The OVMF files one machine boots with."""

    code: Path  # read-only pflash 0
    vars_template: Path  # copied to the run folder, pflash 1
    secure_boot: bool


def firmware_for(spec: FirmwareSpec, ovmf_dir: Path = OVMF_DIR) -> Firmware | None:
    """The OVMF pair for a UEFI machine, None for BIOS."""
    if spec.bootloader == "bios":
        return None
    if spec.bootloader != "uefi":
        raise BackendError(f"Unknown bootloader {spec.bootloader!r} (expected bios or uefi).")
    if spec.secure_boot:
        firmware = Firmware(
            ovmf_dir / "OVMF_CODE_4M.secboot.fd", ovmf_dir / "OVMF_VARS_4M.ms.fd", True
        )
    else:
        firmware = Firmware(ovmf_dir / "OVMF_CODE_4M.fd", ovmf_dir / "OVMF_VARS_4M.fd", False)
    for path in (firmware.code, firmware.vars_template):
        if not path.is_file():
            raise BackendError(f"UEFI firmware file {path} is missing (apt-get install ovmf).")
    return firmware


def prepare_vars(run: RunFolder, firmware: Firmware, *, persistent: bool) -> None:
    """Give the machine its own writable vars: kept across starts only for persistent EFI.

    A kept copy is replaced anyway when it came from another template (Secure Boot switched).
    """
    template_name = firmware.vars_template.name
    recorded = run.efi_vars_template.read_text().strip() if run.efi_vars_template.exists() else ""
    if persistent and run.efi_vars.exists() and recorded == template_name:
        return
    tmp = run.efi_vars.with_name(".OVMF_VARS.tmp")
    shutil.copyfile(firmware.vars_template, tmp)
    tmp.replace(run.efi_vars)
    run.efi_vars_template.write_text(template_name + "\n")
