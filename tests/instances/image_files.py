"""Image files for tests, among them one that is both an ISO 9660 image and a qcow2 whose
backing file is a decoy: the attack on image kinds. The qcow2 leaves the rest of its first cluster unused, and an ISO's own data
starts at 32 KiB (its system area before is never read), so both fit in one file."""

import io
import os
import subprocess
from pathlib import Path

import pycdlib

SYSTEM_AREA = 0x8000  # an ISO's volume descriptors start here ("CD001" at 0x8001)
QCOW2_CLUSTER = 0x10000


def decoy(folder: Path) -> Path:
    """A file standing for a host secret; never a real system file."""
    path = folder / "decoy-secret"
    path.write_bytes(b"DECOY-SECRET\n".ljust(65536, b"\0"))
    return path


def polyglot(folder: Path, name: str = "polyglot.iso", backing: Path | None = None) -> Path:
    """A valid ISO that qemu-img reads as a qcow2 backed by `backing` (a decoy by default)."""
    backing = backing or decoy(folder)
    path = folder / name
    subprocess.run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(backing), "-F", "raw", str(path)],
        check=True,
    )
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, vol_ident="TOOLS")
    iso.add_fp(io.BytesIO(b"drivers\n"), 8, "/README.;1")
    data = io.BytesIO()
    iso.write_fp(data)
    iso.close()
    volume = data.getvalue()[SYSTEM_AREA:]
    assert SYSTEM_AREA + len(volume) <= QCOW2_CLUSTER  # within the qcow2's unused header space
    with path.open("r+b") as file:
        assert not file.read(QCOW2_CLUSTER)[SYSTEM_AREA:].strip(b"\0")
        file.seek(SYSTEM_AREA)
        file.write(volume)
    return path


def qcow2(
    folder: Path, name: str = "cloud.qcow2", size: str = "3G", backing: Path | None = None
) -> Path:
    path = folder / name
    argv = ["qemu-img", "create", "-q", "-f", "qcow2"]
    if backing is not None:
        argv += ["-b", str(backing), "-F", "raw"]
    subprocess.run([*argv, str(path), size], check=True)
    return path


def iso(folder: Path, name: str = "tools.iso") -> Path:
    image = pycdlib.PyCdlib()
    image.new(interchange_level=3, vol_ident="TOOLS")
    image.add_fp(io.BytesIO(b"drivers\n"), 8, "/README.;1")
    path = folder / name
    image.write(str(path))
    image.close()
    return path


def fifo_decoy(folder: Path) -> Path:
    """A decoy no one writes to: whatever opens it to read waits there, so a test that returns
    shows it was never opened."""
    path = folder / "decoy-fifo"
    os.mkfifo(path)
    return path


def vmdk_descriptor(folder: Path, extent: Path, name: str = "disk.vmdk") -> Path:
    """A VMDK text descriptor whose one extent is `extent`: qemu-img told no format opens it."""
    path = folder / name
    path.write_text(
        "# Disk DescriptorFile\nversion=1\nCID=fffffffe\nparentCID=ffffffff\n"
        'createType="monolithicFlat"\n\n# Extent description\n'
        f'RW 2048 FLAT "{extent}" 0\n\nddb.adapterType = "ide"\n'
    )
    return path
