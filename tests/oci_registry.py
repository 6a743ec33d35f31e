"""A real OCI registry for tests: Debian's docker-registry (the CNCF distribution registry) on
loopback, an ephemeral port and a temporary store, with images pushed into it by skopeo from
OCI layouts made by hand (a gzip layer tar, a config with its diff_ids, a manifest)."""

import gzip
import hashlib
import io
import json
import shutil
import socket
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes.kubevirt.boot_disk import build_boot_disk
from tests.services import stop

with warnings.catch_warnings():  # bcrypt for htpasswd, without a package for it
    warnings.simplefilter("ignore", DeprecationWarning)
    import crypt

USER, PASSWORD = "puller", "s3cret-pull"


@dataclass
class Registry:
    address: str  # 127.0.0.1:PORT
    store: Path
    login: tuple[str, str] | None = None

    def push(self, layout: Path, name: str) -> str:
        """The layout pushed as `name` (repository:tag); the digest of its manifest."""
        creds = ["--dest-creds", ":".join(self.login)] if self.login else []
        subprocess.run(
            ["skopeo", "copy", "-q", "--dest-tls-verify=false", *creds, f"oci:{layout}:1",
             f"docker://{self.address}/{name}"],
            check=True, capture_output=True,
        )  # fmt: skip
        return "sha256:" + hashlib.sha256(manifest_of(layout)).hexdigest()

    def blob(self, digest: str) -> Path:
        """Where the registry keeps a blob's bytes (to damage one)."""
        hex_digest = digest.split(":", 1)[1]
        return self.store / "docker/registry/v2/blobs/sha256" / hex_digest[:2] / hex_digest / "data"


def _blob(layout: Path, data: bytes, media_type: str) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def oci_layout(folder: Path, files: dict[str, Path | bytes]) -> Path:
    """An OCI layout (tag "1") of one gzip layer holding `files` (path in the image -> a file
    or its bytes)."""
    (folder / "blobs" / "sha256").mkdir(parents=True)
    tar_bytes = io.BytesIO()
    with tarfile.open(fileobj=tar_bytes, mode="w") as tar:
        for name, content in files.items():
            if isinstance(content, Path):
                tar.add(content, arcname=name)
            else:
                info = tarfile.TarInfo(name)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    layer_tar = tar_bytes.getvalue()
    layer = _blob(folder, gzip.compress(layer_tar, compresslevel=1, mtime=0),
                  "application/vnd.oci.image.layer.v1.tar+gzip")  # fmt: skip
    config = _blob(folder, json.dumps({
        "architecture": "amd64", "os": "linux",
        "rootfs": {"type": "layers",
                   "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()]},
    }).encode(), "application/vnd.oci.image.config.v1+json")  # fmt: skip
    manifest = _blob(folder, json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config, "layers": [layer],
    }).encode(), "application/vnd.oci.image.manifest.v1+json")  # fmt: skip
    manifest["annotations"] = {"org.opencontainers.image.ref.name": "1"}
    (folder / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [manifest]}))
    (folder / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    return folder


def manifest_of(layout: Path) -> bytes:
    index = json.loads((layout / "index.json").read_text())
    return (layout / "blobs" / "sha256" / index["manifests"][0]["digest"][7:]).read_bytes()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(folder: Path, login: tuple[str, str] | None) -> Generator[Registry, None, None]:
    missing = [tool for tool in ("docker-registry", "skopeo") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"the registry tests need {' and '.join(missing)} (bin/zop installs them)")
    address = f"127.0.0.1:{_free_port()}"
    auth = ""
    if login is not None:
        # bcrypt, as the registry's htpasswd wants it; few rounds keep each request quick
        hashed = crypt.crypt(login[1], crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))
        (folder / "htpasswd").write_text(f"{login[0]}:{hashed}\n")
        auth = f"auth:\n  htpasswd:\n    realm: tests\n    path: {folder / 'htpasswd'}\n"
    (folder / "config.yml").write_text(
        f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {folder / 'store'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: {address}\n{auth}"
    )
    with (folder / "registry.log").open("wb") as log:
        process = subprocess.Popen(
            ["docker-registry", "serve", str(folder / "config.yml")], stdout=log, stderr=log
        )
    deadline = time.monotonic() + 30
    while True:  # until /v2/ answers (401 counts: it is up and asks for a login)
        try:
            urllib.request.urlopen(f"http://{address}/v2/", timeout=1)
            break
        except urllib.error.HTTPError:
            break
        except OSError:
            assert process.poll() is None, (folder / "registry.log").read_text()
            assert time.monotonic() < deadline, "the registry did not answer within 30 s"
            time.sleep(0.05)
    try:
        yield Registry(address, folder / "store", login)
    finally:
        stop(process)


@pytest.fixture(scope="session")
def oci_registry(tmp_path_factory) -> Iterator[Registry]:
    """An open registry on loopback (plain HTTP, as loopback registries are)."""
    yield from _start(tmp_path_factory.mktemp("registry"), None)


@pytest.fixture(scope="session")
def oci_auth_registry(tmp_path_factory) -> Iterator[Registry]:
    """A registry that wants the login USER / PASSWORD."""
    yield from _start(tmp_path_factory.mktemp("auth-registry"), (USER, PASSWORD))


@pytest.fixture(scope="session")
def demo_boot_disk(tmp_path_factory) -> Path:
    """The demo guest as a bootable qcow2 (syslinux, its kernel and initrd)."""
    return build_boot_disk(tmp_path_factory.mktemp("boot-disk"))


@pytest.fixture(scope="session")
def demo_container_disk(
    oci_registry, demo_boot_disk, tmp_path_factory
) -> Iterator[tuple[str, str]]:
    """The demo guest pushed as a containerDisk (disk/demo.qcow2): its reference and digest.
    Its copy in the images folder's cache (the worker's too) goes at the end."""
    from instances.containerdisks.cache import cached_file

    layout = oci_layout(tmp_path_factory.mktemp("demo-layout"), {"disk/demo.qcow2": demo_boot_disk})
    digest = oci_registry.push(layout, "containerdisks/demo:1")
    yield f"{oci_registry.address}/containerdisks/demo:1", digest
    shutil.rmtree(cached_file(digest).parent, ignore_errors=True)
