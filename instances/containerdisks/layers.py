"""Take a containerDisk's disk file out of its layer tars, and make it a standalone qcow2."""

import tarfile
from pathlib import Path, PurePosixPath

from instances.backends.base import BackendError
from instances.backends.qemu.images import QemuImg, standalone_refusal

from .errors import ContainerDiskError
from .reference import Reference

DISK_SUFFIXES = (".qcow2", ".img")


def disk_from_layers(reference: Reference, blobs: list[Path], out: Path, cap: int) -> Path:
    """The last /disk/<file>.qcow2 or .img in the layers (later layers win), written under
    `out`; no more than `cap` bytes."""
    out.mkdir(parents=True, exist_ok=True)
    found: Path | None = None
    for blob in blobs:
        try:
            with tarfile.open(blob, mode="r:*") as tar:
                for member in tar:
                    if not _is_disk(member):
                        continue
                    if member.size > cap:
                        raise ContainerDiskError(
                            f"The disk {member.name} in {reference} is {member.size // 2**20} MB,"
                            f" over the {cap // 2**20} MB a container disk may be "
                            "(ZOPDAY_CONTAINER_DISK_MAX_MB): push a smaller image."
                        )
                    source = tar.extractfile(member)
                    if source is None:
                        continue
                    found = out / f"disk{PurePosixPath(member.name).suffix}"
                    with source, found.open("wb") as target:
                        while chunk := source.read(2**20):
                            target.write(chunk)
        except tarfile.TarError:
            raise ContainerDiskError(
                f"A layer of {reference} is not a tar archive (gzip or plain): push a "
                "containerDisk image."
            ) from None
    if found is None:
        raise ContainerDiskError(
            f"{reference} holds no disk: a container disk has /disk/<name>.qcow2 or "
            "/disk/<name>.img in a layer (KubeVirt's containerDisk layout)."
        )
    return found


def _is_disk(member: tarfile.TarInfo) -> bool:
    path = PurePosixPath(member.name.lstrip("/").removeprefix("./"))
    return (
        member.isfile()
        and len(path.parts) == 2
        and path.parts[0] == "disk"
        and path.suffix in DISK_SUFFIXES
    )


def standalone_qcow2(reference: Reference, disk: Path, target: Path) -> Path:
    """`target`: the disk as a qcow2 with no backing or data file (a raw .img converted)."""
    qemu_img = QemuImg()
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        if disk.suffix == ".img":
            qemu_img.convert(disk, target, source_format="raw")
            return target
        info = qemu_img.probe(disk)
    except BackendError as error:
        raise ContainerDiskError(f"The disk in {reference} is not a sound image: {error}") from None
    if reason := standalone_refusal(info, "qcow2"):
        raise ContainerDiskError(
            f"The disk in {reference} cannot be used: {reason} Push a standalone qcow2."
        )
    if problem := qemu_img.check(disk):
        raise ContainerDiskError(f"The disk in {reference}: {problem}")
    disk.rename(target)
    return target
