"""Boot and shutdown of the demo guest through the console's stack, next to bare QEMU.

Measures, median of N runs (default 5), on a fresh SQLite database with a private Redis and a
real Celery worker:
- instance_start -> serial prompt: from the service call to the guest's shell prompt in the
  serial log (the request, Celery, the worker, the backend launching QEMU, the guest booting);
- instance_shutdown -> Stopped: from the service call to the instance reading Stopped;
and the same two for a bare `qemu-system-x86_64` started with the very argv the backend builds
(daemonized the same way), shut down with QMP system_powerdown and timed to QEMU's SHUTDOWN
event; the console's side reads the instance's state from the database every 0.5 ms. Both use
user-mode networking so the guest and its hardware are identical. Before each shutdown both wait
SETTLE seconds after the prompt, so the guest's ACPI daemon is up in either case. Each side has
one warm-up run first (not counted), then the two take turns, run by run.

    python benchmarks/boot.py [--runs 5]
"""

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import time
from pathlib import Path

from stack import ROOT, WORK, as_the_view, start_services, state_reader, stop_processes, wait

# isort: split
from django.contrib.auth import get_user_model
from django.core.management import call_command

from instances.backends import backend_named
from instances.backends.qemu.cmdline import LaunchOptions, build_argv
from instances.backends.qemu.run_folder import RunFolder
from instances.choices import ImageKind, PowerState, Role
from instances.memory import freeze_startup_objects
from instances.models import Image, Instance
from instances.services import power
from instances.services.instances import InstanceRequest, NicRequest, instance_create
from instances.services.network import subnet_create
from instances.services.projects import membership_set, project_create
from instances.specs import machine_spec

PROMPT = b"root@bench-vm:/# "
SETTLE = 1.0  # after the prompt, let the guest's init start acpid before pressing power


def prompts(log: Path) -> int:
    return log.read_bytes().count(PROMPT) if log.exists() else 0


def product_run(instance: Instance, user) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    log = backend_named("qemu").serial_log(instance.machine_id)
    seen = prompts(log)
    instance, request_user = as_the_view(instance, user)
    started = time.perf_counter()
    power.instance_start(instance=instance, actor=request_user)
    wait(lambda: prompts(log) > seen, "the prompt")
    booted = time.perf_counter() - started

    wait(
        lambda: Instance.objects.filter(pk=instance.pk, power_state=PowerState.RUNNING).exists(),
        "Running",
    )
    power_state = state_reader(instance.pk)
    time.sleep(SETTLE)
    instance, request_user = as_the_view(instance, user)
    started = time.perf_counter()
    power.instance_shutdown(instance=instance, actor=request_user)
    wait(lambda: power_state() == PowerState.STOPPED, "Stopped", step=0.0005)
    stopped = time.perf_counter() - started
    instance.refresh_from_db()
    return booted, stopped


def bare_run(argv: list[str], run: RunFolder) -> tuple[float, float]:
    seen = prompts(run.serial_log)
    started = time.perf_counter()
    subprocess.run(argv, check=True)
    wait(lambda: prompts(run.serial_log) > seen, "the bare prompt")
    booted = time.perf_counter() - started
    pid = int(run.qemu_pidfile.read_text())

    time.sleep(SETTLE)
    started = time.perf_counter()
    with socket.socket(socket.AF_UNIX) as qmp:
        qmp.connect(str(run.qmp_socket))
        stream = qmp.makefile("rwb")
        stream.readline()  # greeting
        for command in ("qmp_capabilities", "system_powerdown"):
            stream.write(json.dumps({"execute": command}).encode() + b"\n")
            stream.flush()
        while json.loads(stream.readline()).get("event") != "SHUTDOWN":
            pass  # command replies and other events
        stopped = time.perf_counter() - started
    wait(lambda: not Path(f"/proc/{pid}").exists(), "the bare QEMU to exit")
    return booted, stopped


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if not (ROOT / "var/images/demo/initrd.img").exists():
        subprocess.run(["bash", str(ROOT / "scripts/build_demo_image.sh")], check=True)
    call_command("migrate", verbosity=0)
    freeze_startup_objects()  # this process makes the console's requests: as zopday/wsgi.py does
    processes = start_services(f"host.{socket.gethostname()}")
    try:
        user = get_user_model().objects.create_user("bench")
        project = project_create(slug="bench", name="Bench", actor=user)
        membership_set(project=project, user=user, role=Role.ADMIN, actor=user)
        image = Image.objects.create(
            name="demo", kind=ImageKind.KERNEL, path=str(ROOT / "var/images/demo")
        )
        subnet = subnet_create(
            project=project, actor=user, name="lan", zone="local-1a", cidr_v4="10.66.0.0/24"
        )
        nic = NicRequest(subnet=subnet, ipv4="10.66.0.5")
        request = InstanceRequest(
            name="bench-vm", zone="local-1a", root_image=image, root_size_gb=1, nics=[nic]
        )
        instance = instance_create(project=project, actor=user, request=request)

        product_run(instance, user)  # warm-up: the first task of a fresh worker, disks made

        # The bare run: the argv the backend built, with -no-shutdown dropped so QEMU exits on
        # power-off, in a run folder of its own holding a copy of the same disk and seed.
        backend = backend_named("qemu")
        ours = RunFolder(backend.root / instance.machine_id)
        bare = RunFolder(WORK / "bare" / "b-1")
        bare.path.mkdir(parents=True)
        shutil.copy(ours.seed_iso, bare.seed_iso)
        (WORK / "bare" / "disks").mkdir()
        for disk in instance.disks.all():
            shutil.copy(ours.disk_path(disk.device_name), bare.disk_path(disk.device_name))
        argv = build_argv(machine_spec(instance), bare, LaunchOptions(accel=backend.accel))
        argv = [arg for arg in argv if arg != "-no-shutdown"]
        bare_run(argv, bare)  # warm-up, as for the console

        # Taken in turns, so a slower spell of the machine weighs on both sides alike.
        product, baseline = [], []
        for _ in range(args.runs):
            product.append(product_run(instance, user))
            baseline.append(bare_run(argv, bare))
    finally:
        backend = backend_named("qemu")
        for machine_id in backend.running_machines():
            backend.force_stop(machine_id)
        stop_processes(processes)

    rows = {
        "start_to_prompt": ([p[0] for p in product], [b[0] for b in baseline]),
        "shutdown_to_stopped": ([p[1] for p in product], [b[1] for b in baseline]),
    }
    print(f"{'':<22}{'console s':>10}{'bare qemu s':>12}{'ratio':>7}   (median of {args.runs})")
    ratios = {}
    for name, (ours_s, bare_s) in rows.items():
        ratios[name] = statistics.median(ours_s) / statistics.median(bare_s)
        ours_median, bare_median = statistics.median(ours_s), statistics.median(bare_s)
        print(f"{name:<22}{ours_median:>10.3f}{bare_median:>12.3f}{ratios[name]:>7.2f}")
    for name, (ours_s, bare_s) in rows.items():
        for side, runs in (("console", ours_s), ("bare", bare_s)):
            print(f"  {name} {side} runs: " + " ".join(f"{1000 * s:.0f}" for s in runs) + " ms")
    for name, ratio in ratios.items():
        print(f"figure: {name}_vs_bare_qemu = {ratio:.2f} x")
    for name, (ours_s, _) in rows.items():
        print(f"figure: {name} = {statistics.median(ours_s):.3f} s")
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
