"""Pull a container disk once per digest into the images folder's cache, shared by every
instance that uses it. Steps:
1. resolve the reference to the digest of its linux/amd64 manifest (a tag that moved since the
   disk last pulled it is refused);
2. check the layer sizes against the cap, copy the image by digest with skopeo;
3. verify the manifest and every blob against their sha256 digests;
4. take /disk/<file>.qcow2 or .img out of the layers, make it a standalone qcow2;
5. move it into place. A failed pull leaves nothing behind."""

import contextlib
import fcntl
import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from .errors import ContainerDiskError
from .layers import disk_from_layers, standalone_qcow2
from .reference import Reference, parse_reference
from .skopeo import Access, copy_to_folder, inspect_raw

MB = 1024 * 1024
INDEX_TYPES = {
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
}


@dataclass(frozen=True)
class CachedDisk:
    digest: str
    path: Path  # the qcow2 that instances' overlays are made over: never written to


def cache_root() -> Path:
    return Path(settings.ZOPDAY_IMAGES_DIR) / "containerdisks"


def cached_file(digest: str) -> Path:
    return cache_root() / digest.replace(":", "-") / "disk.qcow2"


def container_source(reference: str, digest: str) -> tuple[Path | None, str]:
    """A container disk's cached file and its reference pinned by digest, once pulled; before
    that, no file and the reference as given."""
    if not digest:
        return None, reference
    return cached_file(digest), str(parse_reference(reference).pinned(digest))


def max_bytes() -> int:
    return int(settings.ZOPDAY_CONTAINER_DISK_MAX_MB) * MB


def resolve(reference: Reference, access: Access) -> tuple[str, dict[str, Any]]:
    """The digest of the image's manifest (for linux/amd64 when the reference names an
    index), and that manifest."""
    raw = inspect_raw(reference, access)
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    if reference.digest and digest != reference.digest:
        raise ContainerDiskError(
            f"The registry answered {reference} with a manifest whose digest is {digest}: "
            "it does not match; check the digest."
        )
    manifest = _manifest(reference, raw)
    if manifest.get("mediaType") in INDEX_TYPES or "manifests" in manifest:
        entries = manifest.get("manifests")
        entry = next(
            (m for m in (entries if isinstance(entries, list) else [])
             if isinstance(m, dict) and isinstance(m.get("platform"), dict)
             and m["platform"].get("architecture") == "amd64" and m.get("digest")),
            None,
        )  # fmt: skip
        if entry is None:
            raise ContainerDiskError(f"{reference} has no linux/amd64 image: push one.")
        return resolve(reference.pinned(str(entry["digest"])), access)
    return digest, manifest


def _manifest(reference: Reference, raw: bytes) -> dict[str, Any]:
    """The registry's answer read as a manifest: a JSON object, or a message saying it is not."""
    try:
        manifest = json.loads(raw)
    except ValueError:
        manifest = None
    if not isinstance(manifest, dict):
        raise ContainerDiskError(
            f"{reference.registry} did not answer {reference} with a manifest (its reply is not "
            "a JSON object): check that the host is a container registry."
        )
    return manifest


def pull(reference: Reference, access: Access, *, expected: str = "") -> CachedDisk:
    """The cached disk of the image `reference` names now; `expected`: the digest a disk
    pulled before, which a tag must still name."""
    digest, manifest = resolve(reference, access)
    require_unmoved(reference, expected, digest)
    target = cached_file(digest)
    if target.is_file():
        return CachedDisk(digest, target)
    with _locked(digest):
        if not target.is_file():  # another worker may have pulled it while this one waited
            _pull_into(reference.pinned(digest), access, manifest, target)
    return CachedDisk(digest, target)


def require_unmoved(reference: Reference, expected: str, digest: str) -> None:
    """A disk runs the image it first pulled: a tag that names another one now is refused."""
    if expected and digest != expected:
        raise ContainerDiskError(
            f"The tag of {reference} moved since this disk pulled it: it named {expected} "
            f"then and names {digest} now. Give the reference by digest (…@{expected}) to keep "
            "the disk as it was, or by the new digest to take the new image."
        )


@contextlib.contextmanager
def _locked(digest: str) -> Iterator[None]:
    cache_root().mkdir(parents=True, exist_ok=True)
    path = cache_root() / f".lock-{digest.replace(':', '-')}"
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:  # a pull that raced past the unlinked file finds the copy, or moves in last
            path.unlink(missing_ok=True)


def check_layers(reference: Reference, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The manifest's layers, once none is over the cap (read before anything is fetched)."""
    layers = [dict(layer) for layer in manifest.get("layers") or []]
    if not layers:
        raise ContainerDiskError(f"{reference} has no layers, so no disk: push a containerDisk.")
    for layer in layers:
        if int(layer.get("size", 0)) > max_bytes():
            raise ContainerDiskError(_over_cap(reference, str(layer.get("digest")), layer["size"]))
    return layers


def _pull_into(
    reference: Reference, access: Access, manifest: dict[str, Any], target: Path
) -> None:
    layers = check_layers(reference, manifest)
    work = Path(tempfile.mkdtemp(prefix=".pull-", dir=cache_root()))
    try:
        copy_to_folder(reference, access, work / "image")
        _verify(reference, work / "image", manifest, layers)
        blobs = [work / "image" / str(layer["digest"]).split(":", 1)[1] for layer in layers]
        disk = disk_from_layers(reference, blobs, work / "out", max_bytes())
        made = standalone_qcow2(reference, disk, work / "final" / "disk.qcow2")
        target.parent.parent.mkdir(parents=True, exist_ok=True)
        try:
            made.parent.rename(target.parent)
        except OSError:
            if not target.is_file():  # not another pull's copy in place: a real failure
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _verify(
    reference: Reference, folder: Path, manifest: dict[str, Any], layers: list[dict[str, Any]]
) -> None:
    """The manifest skopeo kept and every blob it names have the digests the manifest says."""
    kept = json.loads((folder / "manifest.json").read_bytes())
    if kept.get("layers") != manifest.get("layers") or kept.get("config") != manifest.get("config"):
        raise ContainerDiskError(f"The manifest of {reference} changed while it was pulled.")
    config = manifest.get("config")
    for blob in [*layers, *([dict(config)] if isinstance(config, dict) else [])]:
        algorithm, _, hex_digest = str(blob.get("digest", "")).partition(":")
        path = folder / hex_digest
        if algorithm != "sha256" or not path.is_file():
            raise ContainerDiskError(f"{reference} names a blob skopeo did not fetch: {blob}.")
        if _sha256(path) != hex_digest:
            raise ContainerDiskError(
                f"The blob sha256:{hex_digest[:12]}… of {reference} does not match its digest: "
                "the registry sent a damaged or altered image; push it again."
            )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for chunk in iter(lambda: file.read(MB), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _over_cap(reference: Reference, digest: str, size: object) -> str:
    return (
        f"The layer {digest[:19]}… of {reference} is {int(str(size)) // MB} MB, over the "
        f"{max_bytes() // MB} MB a container disk may be (ZOPDAY_CONTAINER_DISK_MAX_MB): "
        "push a smaller image."
    )
