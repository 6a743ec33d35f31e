"""qemu-img for disks of stopped machines: create (optionally over a backing image), grow, snapshot.

A running QEMU holds a write lock on its images; the backend uses QMP for running machines and
these only when the machine is stopped (reads pass `-U`, which is safe for metadata). Every call
names the format: a probed one could be a file that names host files (`probe` reads the header).
"""

import json
import logging
import shutil
import subprocess
from pathlib import Path
from typing import Any

from instances.backends.base import BackendError
from instances.backends.qemu.formats import (
    FORMAT_NAMES,
    UnreadableImage,
    detect_format,
    qcow2_dependency,
    read_ends,
)

log = logging.getLogger(__name__)
GIB = 1024**3
CHECK_SOUND = (0, 3)  # qemu-img check: no errors, or only leaked clusters
CHECK_CORRUPT = 2
READ_FORMATS = ("qcow2", "raw")  # the formats the console hands qemu-img to read


class QemuImg:
    """The qemu-img binary; failures become BackendError with qemu-img's own last line (but
    those of `probe`, which reads files users gave)."""

    def __init__(self, binary: str = "qemu-img") -> None:
        self.binary = binary

    def create(self, path: Path, size_gb: int, backing: Path | None = None) -> None:
        argv = [self.binary, "create", "-q", "-f", "qcow2"]
        if backing is not None:
            if not backing.is_file():
                raise BackendError(f"The disk image {backing} does not exist.")
            self.require_standalone(backing, "qcow2")
            argv += ["-b", str(backing), "-F", "qcow2"]
        elif size_gb <= 0:
            raise BackendError(f"Disk {path.stem} needs a size or an image.")
        argv.append(str(path))
        if size_gb > 0 and (backing is None or size_gb * GIB > self.virtual_size(backing)):
            argv.append(f"{size_gb}G")
        self._run(argv, f"create disk {path.stem}")

    def convert(self, source: Path, target: Path, *, source_format: str) -> None:
        """`source` (read as `source_format`, never probed) into a new standalone qcow2."""
        argv = [self.binary, "convert", "-q", "-f", source_format, "-O", "qcow2"]
        self._run([*argv, str(source), str(target)], f"convert {source.name}")

    def resize(self, path: Path, size_gb: int) -> None:
        argv = [self.binary, "resize", "-q", "-f", "qcow2", str(path), f"{size_gb}G"]
        self._run(argv, f"resize {path.stem}")

    def snapshot(self, path: Path, name: str) -> None:
        self._run(self._snapshot_argv("-c", name, path), f"snapshot {path.stem}")

    def delete_snapshot(self, path: Path, name: str) -> None:
        self._run(self._snapshot_argv("-d", name, path), f"delete a snapshot of {path.stem}")

    def revert_snapshot(self, path: Path, name: str) -> None:
        self._run(self._snapshot_argv("-a", name, path), f"revert {path.stem}")

    def _snapshot_argv(self, action: str, name: str, path: Path) -> list[str]:
        """qemu-img snapshot takes no -f: the format is named in the image's options."""
        options = "driver=qcow2,file.driver=file,file.filename=" + str(path).replace(",", ",,")
        return [self.binary, "snapshot", "--image-opts", action, name, options]

    def snapshots(self, path: Path) -> list[str]:
        return [entry["name"] for entry in self.info(path, "qcow2").get("snapshots", [])]

    def virtual_size(self, path: Path) -> int:
        return int(self.info(path, "qcow2")["virtual-size"])

    def info(self, path: Path, fmt: str) -> dict[str, Any]:
        """What qemu-img reads of the image as `fmt` (its backing files are not opened)."""
        argv = [self.binary, "info", "-U", "--output=json", "-f", fmt, str(path)]
        return dict(json.loads(self._run(argv, f"read {path.name}")))

    def probe(self, path: Path) -> dict[str, Any]:
        """What the file really is: its format read from its header, then what qemu-img, told
        that format, reads of a raw file or a qcow2 naming no other file (else only "format",
        and "depends-on" for a qcow2 naming one). BackendError never quotes qemu-img."""
        try:
            header, trailer = read_ends(path)
        except UnreadableImage as error:
            raise BackendError(str(error)) from None
        found = detect_format(header, trailer)
        depends_on = qcow2_dependency(header) if found == "qcow2" else ""
        if found not in READ_FORMATS or depends_on:
            return {"format": found, "depends-on": depends_on}
        try:
            return self.info(path, found)
        except BackendError as error:  # its words may name files: logged, not shown
            log.warning("qemu-img could not read %s as %s: %s", path, found, error.message)
            raise BackendError(
                f"qemu-img cannot read {path.name} as {FORMAT_NAMES[found]}.",
                retryable=error.retryable,
            ) from None

    def require_standalone(self, path: Path, fmt: str) -> dict[str, Any]:
        """The probe of a file that must be a `fmt` image naming no other file; BackendError
        saying why when it is not (another format, a backing or an external data file)."""
        info = self.probe(path)
        if reason := standalone_refusal(info, fmt):
            raise BackendError(f"The image {path.name} cannot be used: {reason}")
        return info

    def convert_raw(self, source: Path, target: Path, timeout: float = 3600) -> None:
        """A raw disk image rewritten as a standalone qcow2."""
        argv = [self.binary, "convert", "-q", "-f", "raw", "-O", "qcow2", str(source), str(target)]
        self._run(argv, f"convert {source.name} to qcow2", timeout)

    def check(self, path: Path, timeout: float = 600) -> str:
        """qcow2's own consistency check: "" when the image is sound (leaked clusters only
        waste space), else what is wrong, for the user."""
        argv = [self.binary, "check", "-q", "-f", "qcow2", str(path)]
        try:
            result = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return f"qemu-img could not check this image within {timeout:.0f} s."
        if result.returncode in CHECK_SOUND:
            return ""
        if result.returncode == CHECK_CORRUPT:
            return "qemu-img check finds this image corrupt: repair it (qemu-img check -r all)."
        return "qemu-img could not check this image."

    def _run(self, argv: list[str], what: str, timeout: float = 120) -> str:
        if shutil.which(self.binary) is None:
            raise BackendError(f"{self.binary} is not installed (apt-get install qemu-utils).")
        try:
            result = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise BackendError(
                f"Could not {what}: qemu-img took over {timeout:.0f} s.", retryable=True
            ) from None
        if result.returncode != 0:
            reason = last_line(result.stderr) or f"exit status {result.returncode}"
            raise BackendError(f"Could not {what}: {reason}")
        return result.stdout


def standalone_refusal(info: dict[str, Any], fmt: str) -> str:
    """Why the probed image (`info`) is not a standalone `fmt` image ("" when it is):
    a file of two formats, or one naming a host file, would let a guest read that file."""
    probed = str(info.get("format") or "unknown")
    if probed != fmt:
        return f"it is {FORMAT_NAMES.get(probed, probed)}, not {FORMAT_NAMES[fmt]}."
    depends_on = info.get("depends-on")
    backing = info.get("backing-filename") or info.get("full-backing-filename")
    if depends_on == "a backing file" or backing:
        return "it names a backing file, so it depends on another file."
    data = info.get("format-specific", {}).get("data", {})
    if depends_on or data.get("data-file") or data.get("data-file-raw"):
        return "it names an external data file, so it depends on another file."
    return ""


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
