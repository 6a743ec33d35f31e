"""A VM's persistent EFI vars and TPM, kept between its VMIs as KubeVirt keeps them (in the VM's
backend-storage PVC, here a folder shared by the nodes) and gone with the VM. Without
`persistent`, each VMI starts with the firmware's own vars and a TPM made anew."""

import shutil
from pathlib import Path
from typing import Any

from instances.backends.qemu.run_folder import RunFolder

Body = dict[str, Any]


def _persistent(vmi: Body) -> tuple[bool, bool]:
    """(persistent EFI, persistent TPM) as the VMI's domain asks."""
    domain = vmi["spec"]["domain"]
    efi = domain.get("firmware", {}).get("bootloader", {}).get("efi") or {}
    tpm = domain.get("devices", {}).get("tpm")
    tpm_on = tpm is not None and tpm.get("enabled", True)
    return bool(efi.get("persistent")), bool(tpm_on and tpm.get("persistent"))


class BackendStorage:
    """Each VM's kept state under `root`, by the VM's machine id."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def restore(self, vmi: Body, run: RunFolder, machine_id: str) -> None:
        """Before a VMI starts on a node: its kept state in place, and nothing else."""
        kept = RunFolder(self.root / machine_id)
        efi, tpm = _persistent(vmi)
        run.path.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(run.tpm_state, ignore_errors=True)
        if tpm and kept.tpm_state.is_dir():
            shutil.copytree(kept.tpm_state, run.tpm_state)
        for path, kept_path in ((run.efi_vars, kept.efi_vars),
                                (run.efi_vars_template, kept.efi_vars_template)):  # fmt: skip
            path.unlink(missing_ok=True)
            if efi and kept_path.is_file():
                shutil.copyfile(kept_path, path)

    def keep(self, vmi: Body, run: RunFolder, machine_id: str) -> None:
        """As a VMI ends: what it must keep, copied out of the node's run folder."""
        efi, tpm = _persistent(vmi)
        kept = RunFolder(self.root / machine_id)
        kept.path.mkdir(parents=True, exist_ok=True)
        if tpm and run.tpm_state.is_dir():
            shutil.rmtree(kept.tpm_state, ignore_errors=True)
            shutil.copytree(run.tpm_state, kept.tpm_state)
        if efi and run.efi_vars.is_file():
            shutil.copyfile(run.efi_vars, kept.efi_vars)
            shutil.copyfile(run.efi_vars_template, kept.efi_vars_template)

    def forget_all_but(self, machine_ids: set[str]) -> None:
        """A VM gone takes its backend storage along."""
        for folder in self.root.glob("*"):
            if folder.name not in machine_ids:
                shutil.rmtree(folder, ignore_errors=True)
