"""CDI's import controller, as far as the console depends on it: each DataVolume is populated
by an importer of its own (a thread here, a pod on a cluster) that really fetches its
`source.http.url` (a HEAD for the size, then byte ranges, as CDI's nbdkit-based importer reads),
pulls its `source.registry.url` (the disk inside a container image, through the nodes' cache)
or clones its `source.pvc`, converts it to the raw `disk.img` of its volume and checks that it fits the requested
storage.

Its status moves as CDI's does: Pending, ImportScheduled, ImportInProgress (progress "NN.NN%"),
Succeeded, with the Bound, Ready and Running conditions CDI writes. A failed import stays
ImportInProgress with Running False for reason Error, its message CDI's, and is retried with a
back-off (restartCount counts the tries), as CDI restarts its importer pod."""

import base64
import contextlib
import copy
import json
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from instances.containerdisks import cache
from instances.containerdisks.errors import ContainerDiskError
from instances.containerdisks.reference import parse_reference
from instances.containerdisks.skopeo import Access, plain_http
from tests.fakes.kubevirt.store import BY_KIND, ApiError, Body, Store

DATA_VOLUME, PVC = BY_KIND["DataVolume"], BY_KIND["PersistentVolumeClaim"]
SECRET = BY_KIND["Secret"]
RANGE_BYTES = 8 * 1024 * 1024  # one read of the importer
BACKOFF = (1.0, 2.0, 4.0, 8.0)  # seconds before each retry of a failed import, then the last


class ImportFailed(Exception):
    """Why an import failed, in CDI's words."""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind: str, status: bool, reason: str = "", message: str = "") -> Body:
    now = _now()
    condition: Body = {"type": kind, "status": "True" if status else "False"}
    condition.update(lastHeartbeatTime=now, lastTransitionTime=now)
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def _quantity_bytes(text: str) -> int:
    for suffix, factor in (("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30), ("Ti", 1 << 40)):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(float(text))


class Cdi:
    """An importer thread per DataVolume of the store; each volume's files under `root`."""

    def __init__(self, store: Store, root: Path) -> None:
        self.store, self.root = store, root / "volumes"
        self.importers: dict[str, threading.Thread] = {}  # by the DataVolume's uid
        self.closing = threading.Event()

    def stop(self) -> None:
        self.closing.set()
        for thread in list(self.importers.values()):
            thread.join(10)

    def reconcile(self) -> None:
        """An importer for each new DataVolume; the volume of each deleted one removed."""
        volumes, _ = self.store.list(DATA_VOLUME, None, lambda body: True)
        present = {volume["metadata"]["uid"] for volume in volumes}
        for volume in volumes:
            uid = volume["metadata"]["uid"]
            if uid not in self.importers:
                thread = threading.Thread(target=self._populate, args=(volume,), daemon=True)
                self.importers[uid] = thread
                thread.start()
        for uid in set(self.importers) - present:
            if not self.importers[uid].is_alive():
                del self.importers[uid]
                shutil.rmtree(self.root / uid, ignore_errors=True)

    # ---- what KubeVirt reads --------------------------------------------------------------
    def phase(self, namespace: str, name: str) -> str:
        volume = self.store.find(DATA_VOLUME, namespace, name)
        return (volume or {}).get("status", {}).get("phase", "")

    def ready(self, namespace: str, names: list[str]) -> bool:
        return all(self.phase(namespace, name) == "Succeeded" for name in names)

    def failing(self, namespace: str, names: list[str]) -> bool:
        """Whether an import has failed (KubeVirt's DataVolumeError)."""
        for name in names:
            volume = self.store.find(DATA_VOLUME, namespace, name) or {}
            status = volume.get("status", {})
            running = [c for c in status.get("conditions", []) if c["type"] == "Running"]
            if status.get("phase") == "Failed" or (running and running[0].get("reason") == "Error"):
                return True
        return False

    def disk_file(self, namespace: str, name: str, *, cdrom: bool) -> Path | None:
        """The file virt-launcher gives QEMU for the volume: the raw disk.img (a CD-ROM's ISO),
        or for a disk a qcow2 copy, which the node's QEMU backend overlays as it does images;
        None for a blank volume (the node makes the disk) or one not imported."""
        volume = self.store.find(DATA_VOLUME, namespace, name)
        if volume is None or volume.get("status", {}).get("phase") != "Succeeded":
            return None
        folder = self.root / volume["metadata"]["uid"]
        path = folder / ("disk.img" if cdrom else "disk.qcow2")
        return path if path.is_file() else None

    # ---- the importer -----------------------------------------------------------------------
    def _write(self, volume: Body, status: Body) -> bool:
        """The DataVolume's new status; False once the DataVolume is gone (or replaced)."""
        meta = volume["metadata"]
        current = self.store.find(DATA_VOLUME, meta["namespace"], meta["name"])
        if current is None or current["metadata"]["uid"] != meta["uid"]:
            return False
        current["status"] = copy.deepcopy(status)
        current["metadata"].pop("resourceVersion", None)
        try:
            self.store.replace(DATA_VOLUME, meta["namespace"], current, status=True)
        except ApiError:
            return False
        return True

    def _claim(self, volume: Body) -> None:
        """The DataVolume's PersistentVolumeClaim of its name, bound at the size it asks for
        and owned by it (the garbage collector takes it with the DataVolume)."""
        meta, spec = volume["metadata"], volume["spec"]
        requests = spec.get("storage", spec.get("pvc", {})).get("resources", {}).get("requests", {})
        size = str(requests.get("storage", "1Gi"))
        owner = {
            "apiVersion": volume["apiVersion"], "kind": "DataVolume", "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True,
        }  # fmt: skip
        claim: Body = {
            "metadata": {"name": meta["name"], "ownerReferences": [owner]},
            "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
                     "resources": {"requests": {"storage": size}}},
            "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                       "capacity": {"storage": size}},
        }  # fmt: skip
        with contextlib.suppress(ApiError):  # made already (an import tried again)
            self.store.create(PVC, meta["namespace"], claim)

    def _populate(self, volume: Body) -> None:
        name = volume["metadata"]["name"]
        bound = _condition("Bound", True, "Bound", f"PVC {name} Bound")
        status: Body = {"phase": "Pending", "claimName": name, "progress": "N/A", "conditions": [
            _condition("Bound", False, "Pending", f"PVC {name} Pending"),
            _condition("Ready", False), _condition("Running", False),
        ]}  # fmt: skip
        if not self._write(volume, status):
            return
        self._claim(volume)
        status.update(phase="ImportScheduled", conditions=[
            bound, _condition("Ready", False), _condition("Running", False),
        ])  # fmt: skip
        if not self._write(volume, status):
            return
        tries = 0
        while not self.closing.is_set():
            status.update(phase="ImportInProgress", progress="0.00%", conditions=[
                bound, _condition("Ready", False), _condition("Running", True, "Pod is running"),
            ])  # fmt: skip
            if not self._write(volume, status):
                return
            try:
                self._import(volume, status)
            except ImportFailed as error:
                tries += 1
                status.update(restartCount=tries, conditions=[
                    bound, _condition("Ready", False),
                    _condition("Running", False, "Error", str(error)),
                ])  # fmt: skip
                if not self._write(volume, status):
                    return
                if self.closing.wait(BACKOFF[min(tries, len(BACKOFF)) - 1]):
                    return
                continue
            status.update(phase="Succeeded", progress="100.0%", conditions=[
                bound, _condition("Ready", True),
                _condition("Running", False, "Completed", "Import Complete"),
            ])  # fmt: skip
            self._write(volume, status)
            return

    def _import(self, volume: Body, status: Body) -> None:
        spec = volume["spec"]
        folder = self.root / volume["metadata"]["uid"]
        folder.mkdir(parents=True, exist_ok=True)
        source = spec.get("source", {})
        download = folder / "download"
        if "pvc" in source:
            self._clone(source["pvc"], download)
        elif "registry" in source:
            self._pull(volume, source["registry"], download)
        elif "http" in source:
            self._fetch(volume, source["http"]["url"], download, status)
        else:
            return  # a blank volume: the node makes the disk when the VMI starts
        probe = subprocess.run(
            ["qemu-img", "info", "--output=json", str(download)], capture_output=True, text=True
        )
        if probe.returncode != 0:
            raise ImportFailed(f"Unable to process data: {probe.stderr.strip()}")
        info = json.loads(probe.stdout)
        requests = spec.get("storage", spec.get("pvc", {})).get("resources", {}).get("requests", {})
        available = _quantity_bytes(str(requests.get("storage", "0")))
        if info["virtual-size"] > available:
            raise ImportFailed(
                f"Unable to process data: Virtual image size {info['virtual-size']} is larger "
                f"than the reported available storage {available}. A larger PVC is required."
            )
        for target, fmt in (("disk.img", "raw"), ("disk.qcow2", "qcow2")):
            converted = subprocess.run(
                ["qemu-img", "convert", "-q", "-f", info["format"], "-O", fmt, str(download),
                 str(folder / target)],
                capture_output=True, text=True,
            )  # fmt: skip
            if converted.returncode != 0:
                raise ImportFailed(f"Unable to process data: {converted.stderr.strip()}")
        download.unlink()

    def _clone(self, source: Body, target: Path) -> None:
        """The data of the PersistentVolumeClaim `source` names, copied into `target` (a host-
        assisted clone); a claim that is not there (yet) fails this try, as CDI waits for it."""
        namespace, name = source.get("namespace", ""), source["name"]
        claim = self.store.find(PVC, namespace, name)
        if claim is None:
            raise ImportFailed(f"The source PVC {namespace}/{name} doesn't exist")
        owner = next(iter(claim["metadata"].get("ownerReferences", [])), {})
        data = self.root / owner.get("uid", "-") / "disk.qcow2"
        if not data.is_file():
            raise ImportFailed(f"The source PVC {namespace}/{name} is not populated")
        shutil.copyfile(data, target)

    def _pull(self, volume: Body, registry: Body, target: Path) -> None:
        """The disk of the image `registry.url` names (docker://), pulled with the login of its
        `secretRef` (accessKeyId, secretKey) through the nodes' cache, copied into `target`."""
        url = registry["url"]
        if not url.startswith("docker://"):
            raise ImportFailed(f"Unable to process data: {url} is not a docker:// URL")
        user = password = ""
        if name := registry.get("secretRef"):
            secret = self.store.find(SECRET, volume["metadata"]["namespace"], name)
            if secret is None:
                raise ImportFailed(f'secrets "{name}" not found')
            data = secret.get("stringData") or {
                key: base64.b64decode(value).decode()
                for key, value in secret.get("data", {}).items()
            }
            user, password = data.get("accessKeyId", ""), data.get("secretKey", "")
        try:
            reference = parse_reference(url.removeprefix("docker://"))
            access = Access(plain_http(reference.registry), username=user, password=password)
            cached = cache.pull(reference, access)
        except ContainerDiskError as error:
            raise ImportFailed(f"Unable to process data: {error.message}") from None
        shutil.copyfile(cached.path, target)

    def _fetch(self, volume: Body, url: str, target: Path, status: Body) -> None:
        """The URL's content into `target`, a range at a time, with progress on the volume."""
        try:
            request = urllib.request.Request(url, method="HEAD")
            with urllib.request.urlopen(request, timeout=30) as answer:
                size = int(answer.headers.get("Content-Length", "0"))
            with target.open("wb") as file:
                while (done := file.tell()) < size and not self.closing.is_set():
                    last = min(done + RANGE_BYTES, size) - 1
                    ranged = urllib.request.Request(url, headers={"Range": f"bytes={done}-{last}"})
                    with urllib.request.urlopen(ranged, timeout=30) as answer:
                        if answer.status != 206:
                            raise ImportFailed(
                                "Unable to transfer source data: the server did not send "
                                f"bytes {done}-{last} (status {answer.status})"
                            )
                        file.write(answer.read())
                    status["progress"] = f"{100 * file.tell() / size:.2f}%"
                    self._write(volume, status)
        except urllib.error.HTTPError as error:
            raise ImportFailed(
                "Unable to connect to http data source: expected status code 200, got "
                f"{error.code}. Status: {error.code} {error.reason}"
            ) from None
        except (urllib.error.URLError, OSError) as error:
            raise ImportFailed(f"Unable to connect to http data source: {error}") from None
