"""An image file's format, read from its header in Python with the tests qemu's own probes make.

qemu-img told no format would open whatever the file names (a VMDK extent, a backing file) and
say in its error which host files exist: so the console names the format it read here instead.
"""

import os
import stat
import struct
from pathlib import Path

PROBE_BYTES = 512  # what QEMU reads to probe a format (BLOCK_PROBE_BUF_SIZE)
QCOW_MAGIC = b"QFI\xfb"
QCOW2_HEADER_V3 = 104
QCOW2_DATA_FILE = 1 << 2  # the incompatible-features bit of an external data file
VDI_SIGNATURE = struct.pack("<I", 0xBEDA107F)
CLOOP_MAGIC = (
    b"#!/bin/sh\n#V2.0 Format\nmodprobe cloop file=$0 && mount -r -t iso9660 /dev/cloop $1\n"
)
SIGNATURES = [  # (offset, bytes, format)
    (0, b"QED\0", "qed"),
    (0, b"KDMV", "vmdk"),
    (0, b"COWD", "vmdk"),
    (64, VDI_SIGNATURE, "vdi"),
    (0, b"vhdxfile", "vhdx"),
    (0, b"conectix", "vpc"),
    (0, b"LUKS\xba\xbe", "luks"),
    (0, b"WithoutFreeSpace", "parallels"),
    (0, b"WithouFreSpacExt", "parallels"),
    (0, b"Bochs Virtual HD Image\0", "bochs"),
    (0, CLOOP_MAGIC, "cloop"),
]
FORMAT_NAMES = {
    "qcow2": "a qcow2 image",
    "raw": "a raw disk or ISO image",
    "qcow": "a qcow (version 1) image",
    "qed": "a QED image",
    "vmdk": "a VMDK image",
    "vdi": "a VDI image",
    "vhdx": "a VHDX image",
    "vpc": "a VHD image",
    "luks": "a LUKS encrypted image",
    "parallels": "a Parallels image",
    "bochs": "a Bochs image",
    "cloop": "a cloop image",
    "dmg": "a DMG image",
}


class UnreadableImage(Exception):
    """The path is no regular file the console can read."""


def detect_format(header: bytes, trailer: bytes = b"") -> str:
    """The qemu format name of a file that opens with `header` and ends with `trailer` (see
    `read_ends`): "raw" when no image header is recognised."""
    if header.startswith(QCOW_MAGIC) and len(header) >= 8:
        return "qcow" if struct.unpack(">I", header[4:8])[0] == 1 else "qcow2"
    for offset, signature, name in SIGNATURES:
        if header[offset : offset + len(signature)] == signature:
            return name
    if _is_vmdk_descriptor(header):
        return "vmdk"
    if trailer.startswith(b"koly"):  # a DMG's trailer (QEMU itself guesses one by its name)
        return "dmg"
    return "raw"


def qcow2_dependency(header: bytes) -> str:
    """What other file a qcow2 `header` names ("a backing file", "an external data file"), or
    "": read before qemu-img opens the file, as some QEMU versions did its data file."""
    header = header.ljust(QCOW2_HEADER_V3, b"\0")
    version, backing_offset = struct.unpack(">IQ", header[4:16])
    if backing_offset:
        return "a backing file"
    if version >= 3 and struct.unpack(">Q", header[72:80])[0] & QCOW2_DATA_FILE:
        return "an external data file"
    return ""


def read_ends(path: Path) -> tuple[bytes, bytes]:
    """The file's first PROBE_BYTES and its last 512; nothing but a regular file is read."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO's open would wait
        with os.fdopen(handle, "rb") as file:
            if not stat.S_ISREG(os.fstat(handle).st_mode):
                raise UnreadableImage(f"{path.name} is not a regular file.")
            header = file.read(PROBE_BYTES)
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - 512))
            return header, file.read(512)
    except OSError as error:
        raise UnreadableImage(f"{path.name} cannot be read ({error.strerror}).") from None


def _is_vmdk_descriptor(header: bytes) -> bool:
    """A VMDK text descriptor as QEMU's probe sees one: comments and blank lines, then
    "version=N"; or any text opening with VMware's own descriptor heading."""
    if header.lstrip().startswith(b"# Disk DescriptorFile"):
        return True
    for line in header.split(b"\n"):
        if line.startswith(b"#"):
            continue
        if not line.strip(b" \r"):
            continue
        return line.rstrip(b"\r") in (b"version=1", b"version=2", b"version=3")
    return False
