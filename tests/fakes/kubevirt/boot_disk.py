"""A bootable disk image of the demo guest, as a cloud image is one: a FAT file system holding
the demo kernel and initrd behind syslinux, in qcow2. An instance whose root disk comes from
it boots from that disk alone (no kernel image), so a guest at its prompt proves the disk came
through the cluster's import whole."""

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fakes.kubevirt.fixtures import DEMO_IMAGE

LABEL = "ZOPBOOT"  # the FAT volume label, which a guest can read off the disk
SYSLINUX_CFG = """DEFAULT demo
PROMPT 0
TIMEOUT 0
LABEL demo
  KERNEL vmlinuz
  APPEND console=ttyS0 initrd=initrd.img
"""
TOOLS = {"mkfs.vfat": "dosfstools", "mcopy": "mtools", "syslinux": "syslinux"}


def build_boot_disk(folder: Path) -> Path:
    """`folder`/demo-boot.qcow2, made from the demo image's kernel and initrd."""
    missing = [package for tool, package in TOOLS.items() if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"building a bootable disk needs {', '.join(missing)} (bin/zop installs them)")
    raw, image = folder / "demo-boot.raw", folder / "demo-boot.qcow2"
    size = sum((DEMO_IMAGE / name).stat().st_size for name in ("vmlinuz", "initrd.img"))
    with raw.open("wb") as file:
        file.truncate(size + 16 * 1024 * 1024)
    (folder / "syslinux.cfg").write_text(SYSLINUX_CFG)
    for argv in (
        ["mkfs.vfat", "-n", LABEL, str(raw)],
        ["mcopy", "-i", str(raw), str(DEMO_IMAGE / "vmlinuz"), str(DEMO_IMAGE / "initrd.img"),
         str(folder / "syslinux.cfg"), "::/"],
        ["syslinux", "--install", str(raw)],
        ["qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", str(raw), str(image)],
    ):  # fmt: skip
        subprocess.run(argv, check=True, capture_output=True)
    raw.unlink()
    return image
