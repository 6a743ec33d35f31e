"""Images from anywhere, next to the plain tools doing the same work, measured in one run.

container_disk_pull_boot_vs_skopeo_bare: the demo guest pushed as a containerDisk into a real
registry on loopback (Debian's docker-registry); the console's side is instance_start -> serial
prompt of an instance booting from it with an empty cache (the worker pulls with skopeo,
verifies every digest, takes the disk out of its layer, makes the overlay, launches QEMU); the
baseline is `skopeo copy` of the same image into a folder, `tar` of its disk out of the layer,
`qemu-img create` of an overlay, and a bare `qemu-system-x86_64` with the argv the backend
builds, to the same prompt. One warm-up each, then the two take turns; medians of N runs.

Then url_import_vs_curl: an import from a URL against curl of the same file (url_import.py).

    python benchmarks/images.py [--runs 5]
"""

import argparse
import shutil
import socket
import statistics
import subprocess
import tarfile
import time
from pathlib import Path

from stack import ROOT, WORK, as_the_view, start_services, stop_processes, wait

# isort: split
from django.contrib.auth import get_user_model
from django.core.management import call_command

from instances.backends import backend_named
from instances.backends.qemu.cmdline import LaunchOptions, build_argv
from instances.backends.qemu.run_folder import RunFolder
from instances.choices import DiskRole, ImageKind, PowerState, Role
from instances.containerdisks.cache import cached_file
from instances.memory import freeze_startup_objects
from instances.models import Image, Instance
from instances.services import power
from instances.services.instances import DiskRequest, InstanceRequest, NicRequest, instance_create
from instances.services.network import subnet_create
from instances.services.projects import membership_set, project_create
from instances.specs import machine_spec
from tests.fakes.kubevirt.boot_disk import build_boot_disk
from tests.oci_registry import _start, oci_layout

PROMPT = b"root@bench-oci:/# "


def prompts(log: Path) -> int:
    return log.read_bytes().count(PROMPT) if log.exists() else 0


def forget_cache(digest: str) -> None:
    shutil.rmtree(cached_file(digest).parent, ignore_errors=True)


def product_run(instance: Instance, user, digest: str) -> float:  # type: ignore[no-untyped-def]
    """Start -> prompt with nothing cached: the pull is part of it."""
    forget_cache(digest)
    log = backend_named("qemu").serial_log(instance.machine_id)
    seen = prompts(log)
    instance, request_user = as_the_view(instance, user)
    started = time.perf_counter()
    power.instance_start(instance=instance, actor=request_user)
    wait(lambda: prompts(log) > seen, "the prompt", timeout=300)
    took = time.perf_counter() - started
    wait(
        lambda: Instance.objects.filter(pk=instance.pk, power_state=PowerState.RUNNING).exists(),
        "Running",
    )
    instance, request_user = as_the_view(instance, user)
    power.instance_force_stop(instance=instance, actor=request_user)
    wait(
        lambda: Instance.objects.filter(pk=instance.pk, power_state=PowerState.STOPPED).exists(),
        "Stopped",
    )
    return took


def bare_run(reference: str, argv: list[str], run: RunFolder, overlay: Path) -> float:
    """skopeo copy, tar, qemu-img and bare QEMU to the same prompt."""
    pulled = WORK / "bare-pull"
    shutil.rmtree(pulled, ignore_errors=True)
    seen = prompts(run.serial_log)
    started = time.perf_counter()
    plain = "--src-tls-verify=false"
    subprocess.run(
        ["skopeo", "copy", "-q", plain, f"docker://{reference}", f"dir:{pulled}"], check=True
    )
    for blob in pulled.iterdir():
        if tarfile.is_tarfile(blob):
            subprocess.run(["tar", "-xzf", str(blob), "-C", str(pulled), "disk"], check=True)
    disk = next((pulled / "disk").iterdir())
    overlay.unlink(missing_ok=True)
    subprocess.run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(disk), "-F", "qcow2", str(overlay)],
        check=True,
    )
    subprocess.run(argv, check=True)
    wait(lambda: prompts(run.serial_log) > seen, "the bare prompt", timeout=300)
    took = time.perf_counter() - started
    pid = int(run.qemu_pidfile.read_text())
    subprocess.run(["kill", str(pid)], check=True)
    wait(lambda: not Path(f"/proc/{pid}").exists(), "the bare QEMU to exit")
    return took


def container_disk_figures(runs: int, user, project, subnet) -> dict[str, float]:  # type: ignore[no-untyped-def]
    (WORK / "registry-work").mkdir(parents=True, exist_ok=True)
    registry = _start(WORK / "registry-work", None)  # the tests' registry, on loopback
    address = next(registry)
    try:
        layout = oci_layout(WORK / "layout", {"disk/demo.qcow2": build_boot_disk(WORK)})
        digest = address.push(layout, "bench/demo:1")
        reference = f"{address.address}/bench/demo:1"
        image = Image.objects.create(
            name="demo-oci", kind=ImageKind.CONTAINER, path="", reference=reference
        )
        request = InstanceRequest(
            name="bench-oci", zone="local-1a", root_image=None, root_size_gb=1,
            nics=[NicRequest(subnet=subnet, ipv4="10.66.0.6")],
            disks=[DiskRequest(size_gb=0, role=DiskRole.CONTAINER, image=image)],
        )  # fmt: skip
        instance = instance_create(project=project, actor=user, request=request)
        product_run(instance, user, digest)  # warm-up: the worker's first task, disks made

        # The bare side: the argv the backend built, in a run folder of its own with a copy of
        # the root disk and seed; its container disk is the overlay the bare run makes.
        backend = backend_named("qemu")
        ours = RunFolder(backend.root / instance.machine_id)
        bare = RunFolder(WORK / "bare" / "b-1")
        bare.path.mkdir(parents=True)
        (WORK / "bare" / "disks").mkdir()
        shutil.copy(ours.seed_iso, bare.seed_iso)
        root = instance.disks.get(role=DiskRole.ROOT).device_name
        shutil.copy(ours.disk_path(root), bare.disk_path(root))
        container = instance.disks.get(role=DiskRole.CONTAINER).device_name
        argv = build_argv(machine_spec(instance), bare, LaunchOptions(accel=backend.accel))
        bare_run(f"{address.address}/bench/demo:1", argv, bare, bare.disk_path(container))

        product, baseline = [], []
        for _ in range(runs):
            product.append(product_run(instance, user, digest))
            baseline.append(bare_run(reference, argv, bare, bare.disk_path(container)))
    finally:
        registry.close()
    ours_s, bare_s = statistics.median(product), statistics.median(baseline)
    print(f"container disk pull+boot: console {ours_s:.3f} s, skopeo+bare QEMU {bare_s:.3f} s")
    print("  console runs: " + " ".join(f"{1000 * s:.0f}" for s in product) + " ms")
    print("  bare runs: " + " ".join(f"{1000 * s:.0f}" for s in baseline) + " ms")
    return {"container_disk_pull_boot_vs_skopeo_bare": ours_s / bare_s}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if not (ROOT / "var/images/demo/initrd.img").exists():
        subprocess.run(["bash", str(ROOT / "scripts/build_demo_image.sh")], check=True)
    call_command("migrate", verbosity=0)
    freeze_startup_objects()
    processes = start_services(f"host.{socket.gethostname()}")
    figures: dict[str, float] = {}
    try:
        user = get_user_model().objects.create_user("bench")
        project = project_create(slug="bench", name="Bench", actor=user)
        membership_set(project=project, user=user, role=Role.ADMIN, actor=user)
        subnet = subnet_create(
            project=project, actor=user, name="lan", zone="local-1a", cidr_v4="10.66.0.0/24"
        )
        figures |= container_disk_figures(args.runs, user, project, subnet)
        from benchmarks.url_import import url_import_figures

        figures |= url_import_figures(user, project)
    finally:
        backend = backend_named("qemu")
        for machine_id in backend.running_machines():
            backend.force_stop(machine_id)
        stop_processes(processes)
    for name, ratio in figures.items():
        print(f"figure: {name} = {ratio:.2f} x")
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
