"""Instances on KubeVirt through the console, next to raw `kubernetes` client calls, on one fake.

One fake KubeVirt API server (tests/fakes/kubevirt/, each VMI a real QEMU guest of the demo
image) serves both sides, on a fresh SQLite database with a private Redis, a real Celery worker,
`manage.py watch_clusters` and `manage.py consoleproxy`, as `bin/zop run` starts them:
- start -> serial prompt: the console calls instance_start as the power button's view does (the
  worker's task PUTs the start subresource and watches the VMI), waits for Running in the
  database, then opens the serial console through the console proxy (ticket and session
  cookie) and reads until the guest's prompt. Raw: PUT start, watch the VMI until Running, open
  the VMI's console websocket (plain.kubevirt.io), read until the prompt.
- shutdown -> Stopped: instance_shutdown to Stopped in the database (read every 0.5 ms); raw:
  PUT stop, watch the VMI until it is gone.
The raw side drives a copy of the console's VM (same spec and seed) on the other node; each side
has a warm-up run, then they take turns, SETTLE s after each prompt before the shutdown.
- tracking N instances (100, then 1,000) whose VMs change state CHANGES times a minute: API
  calls a minute and CPU seconds a minute of the console's process, `manage.py watch_clusters`
  (one watch, a GET per change) next to a poller that GETs every VM every POLL seconds, each
  measured over TRACK seconds once it has read everything. The controller is stopped for this
  part: the VMs' statuses are written into the fake's store as virt-controller would.

    python benchmarks/kubevirt.py [--runs 3] [--track 30] [--poll 10] [--changes 60]
"""

import argparse
import copy
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from stack import ROOT, WORK, as_the_view, start_services, state_reader, stop_processes, wait

# isort: split
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from kubernetes import client, watch
from websockets.sync.client import connect

from instances.access import project_role
from instances.backends.kubevirt.connection import TIMEOUT, api_client
from instances.backends.kubevirt.manifests import MACHINE_LABEL
from instances.backends.kubevirt.objects import KUBEVIRT
from instances.choices import ImageKind, PowerState, Role
from instances.consoles.registry import CONSOLE_KINDS
from instances.consoles.tickets import SUBPROTOCOL_PREFIX, console_ticket_issue
from instances.memory import freeze_startup_objects
from instances.models import Cluster, Image, Instance
from instances.services import power
from instances.services.cluster_watch import ClusterWatch, _wanted
from instances.services.clusters import cluster_access, cluster_check
from instances.services.instances import InstanceRequest, NicRequest, instance_create
from instances.services.network import subnet_create
from instances.services.projects import membership_set, project_create

PROMPT = re.compile(rb"root@[\w-]+:/# ")
SETTLE = 1.0  # after the prompt, let the guest's init start acpid before pressing power
ORIGIN = "http://localhost:8000"
TOKEN = "console-token"
FINISHED = ("Succeeded", "Failed")


# ---- the fake and the console's processes ------------------------------------------------------
def start_fake():  # type: ignore[no-untyped-def]
    """The fake API server and its controller, VMIs as QEMU guests of the demo image."""
    from tests.fakes.kubevirt.controller import Controller
    from tests.fakes.kubevirt.fixtures import CONSOLE, DEMO_IMAGE, KERNEL_IMAGE
    from tests.fakes.kubevirt.server import FakeApiServer, Subject

    fake = FakeApiServer(bookmark_seconds=60)  # about as often as kube-apiserver sends them
    fake.add_token(TOKEN, Subject(CONSOLE))
    controller = Controller(fake, WORK / "nodes", registry={KERNEL_IMAGE: DEMO_IMAGE})
    return fake, controller, KERNEL_IMAGE


def manage(*argv: str, log: str) -> subprocess.Popen:
    env = {**os.environ, "CONSOLEPROXY_ALLOWED_ORIGINS": ORIGIN, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "manage.py", *argv], cwd=ROOT, env=env,
        stdout=(WORK / log).open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip


def start_proxy(port: int) -> subprocess.Popen:
    process = manage("consoleproxy", "--host", "127.0.0.1", "--port", str(port), log="proxy.log")

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return True
        except OSError:
            return False

    wait(healthy, "the console proxy", 60, 0.1)
    return process


def cpu_seconds(pid: int) -> float:
    """User and system time of a process so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_until_prompt(websocket) -> None:  # type: ignore[no-untyped-def]
    seen = b""
    while not PROMPT.search(seen):
        message = websocket.recv(timeout=300)
        if isinstance(message, bytes):  # text frames are the proxy's control messages
            seen = seen[-64:] + message


# ---- the console's side ------------------------------------------------------------------------
class Console:
    """The console's side: the services as the views call them, the proxy as a browser opens it."""

    def __init__(self, instance: Instance, user, proxy_port: int) -> None:  # type: ignore[no-untyped-def]
        self.instance, self.user, self.port = instance, user, proxy_port
        self.power_state = state_reader(instance.pk)
        browser = Client()
        browser.force_login(user)
        self.cookie = (
            f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}"
        )

    def start(self) -> float:
        instance, request_user = as_the_view(self.instance, self.user)
        started = time.perf_counter()
        power.instance_start(instance=instance, actor=request_user)
        wait(lambda: self.power_state() == PowerState.RUNNING, "Running", 300, 0.002)
        instance, request_user = as_the_view(self.instance, self.user)  # the console's page
        _, ticket = console_ticket_issue(
            user=request_user, instance=instance, kind=CONSOLE_KINDS["serial"],
            role=project_role(request_user, instance.project),
        )  # fmt: skip
        with connect(
            f"ws://127.0.0.1:{self.port}/consoles/{instance.pk}/serial", origin=ORIGIN,
            subprotocols=["zopday.console", SUBPROTOCOL_PREFIX + ticket],
            additional_headers={"Cookie": self.cookie}, compression=None, open_timeout=30,
        ) as websocket:  # fmt: skip
            read_until_prompt(websocket)
            return time.perf_counter() - started

    def shutdown(self) -> float:
        instance, request_user = as_the_view(self.instance, self.user)
        started = time.perf_counter()
        power.instance_shutdown(instance=instance, actor=request_user)
        wait(lambda: self.power_state() == PowerState.STOPPED, "Stopped", 120, 0.0005)
        return time.perf_counter() - started


# ---- the raw client's side ---------------------------------------------------------------------
class Raw:
    """The same operations as plain `kubernetes` client calls and a websocket, on its own VM."""

    def __init__(self, url: str, namespace: str, name: str) -> None:
        configuration = client.Configuration(host=url)
        configuration.api_key = {"authorization": TOKEN}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        self.api = client.ApiClient(configuration)
        self.custom = client.CustomObjectsApi(self.api)
        self.url, self.namespace, self.name = url, namespace, name
        self.path = f"/apis/subresources.kubevirt.io/v1/namespaces/{namespace}"

    def put(self, action: str, body: dict) -> None:
        response = self.api.call_api(
            "PUT", f"{self.url}{self.path}/virtualmachines/{self.name}/{action}",
            header_params={"Content-Type": "application/json", **self._auth()}, body=body,
        )  # fmt: skip
        response.read()
        assert 200 <= response.status < 300, response.status

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}"}

    def vmi_events(self):  # type: ignore[no-untyped-def]
        return watch.Watch().stream(
            self.custom.list_namespaced_custom_object, *KUBEVIRT, self.namespace,
            "virtualmachineinstances", field_selector=f"metadata.name={self.name}",
            timeout_seconds=300,
        )  # fmt: skip

    def start(self) -> float:
        started = time.perf_counter()
        self.put("start", {})
        events = self.vmi_events()
        for event in events:
            if event["object"].get("status", {}).get("phase") == "Running":
                break
        events.close()
        with connect(
            f"ws{self.url.removeprefix('http')}{self.path}/virtualmachineinstances/{self.name}/"
            "console", subprotocols=["plain.kubevirt.io"], additional_headers=self._auth(),
            compression=None, open_timeout=30,
        ) as websocket:  # fmt: skip
            read_until_prompt(websocket)
            return time.perf_counter() - started

    def shutdown(self) -> float:
        started = time.perf_counter()
        self.put("stop", {})
        events = self.vmi_events()
        for event in events:
            if (
                event["type"] == "DELETED"
                or event["object"].get("status", {}).get("phase") in FINISHED
            ):
                break
        events.close()
        return time.perf_counter() - started


def power_runs(fake, console: Console, raw: Raw, runs: int) -> dict[str, tuple[list, list]]:  # type: ignore[no-untyped-def]
    ours: list[tuple[float, float]] = []
    theirs: list[tuple[float, float]] = []
    for run in range(runs + 1):  # the first of each is a warm-up
        for side, results in ((console, ours), (raw, theirs)):
            booted = side.start()
            time.sleep(SETTLE)
            stopped = side.shutdown()
            if run:
                results.append((booted, stopped))
            time.sleep(0.5)  # the controller removes what is left of the VMI
    return {
        "start_to_prompt": ([r[0] for r in ours], [r[0] for r in theirs]),
        "shutdown_to_stopped": ([r[1] for r in ours], [r[1] for r in theirs]),
    }


# ---- tracking N instances ----------------------------------------------------------------------
def add_tracked(fake, template: Instance, vm: dict, count: int) -> list[Instance]:  # type: ignore[no-untyped-def]
    """`count` more instances of the cluster, Stopped, each with its VM in the fake's store."""
    from tests.fakes.kubevirt.store import BY_KIND

    have = Instance.objects.filter(cluster=template.cluster).count()
    fields = {
        f.attname: getattr(template, f.attname)
        for f in Instance._meta.concrete_fields
        if not f.primary_key
    }
    made = Instance.objects.bulk_create(
        [
            Instance(**{**fields, "name": f"tracked-{have + n}", "power_state": PowerState.STOPPED})
            for n in range(count)
        ],
        batch_size=500,
    )
    namespace = vm["metadata"]["namespace"]
    for instance in made:
        body = copy.deepcopy(vm)
        labels = {**body["metadata"]["labels"], MACHINE_LABEL: instance.machine_id}
        body["metadata"] = {"name": instance.machine_id, "labels": labels}
        stored = fake.store.create(BY_KIND["VirtualMachine"], namespace, body)
        stored["status"] = {"printableStatus": "Stopped", "ready": False, "created": False}
        fake.store.replace(BY_KIND["VirtualMachine"], namespace, stored, status=True)
    return made


class Churn:
    """One VM after another changes state (Stopped <-> Running), `per_minute` times a minute,
    written into the store as virt-controller writes a VM's status."""

    def __init__(self, fake, namespace: str, names: list[str], per_minute: float) -> None:  # type: ignore[no-untyped-def]
        self.fake, self.namespace, self.names = fake, namespace, names
        self.period = 60.0 / per_minute
        self.done = threading.Event()
        self.changes = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Churn":
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join()

    def _run(self) -> None:
        from tests.fakes.kubevirt.store import BY_KIND

        vm_kind = BY_KIND["VirtualMachine"]
        while not self.done.wait(self.period):
            name = self.names[(self.changes * 7919) % len(self.names)]
            vm = self.fake.store.get(vm_kind, self.namespace, name)
            running = vm["status"]["printableStatus"] == "Running"
            vm["status"] = {"printableStatus": "Stopped" if running else "Running",
                            "ready": not running, "created": not running}  # fmt: skip
            self.fake.store.replace(vm_kind, self.namespace, vm, status=True)
            self.changes += 1


def calls(fake) -> int:  # type: ignore[no-untyped-def]
    return sum(fake.requests.values())


def track(
    fake, process: subprocess.Popen, ready, seconds: float, churn: Churn
) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """API calls and CPU seconds a minute of `process` over `seconds`, once `ready()` (which
    returns when to begin)."""
    begin = wait(ready, "the console's process to read every VM", 300, 0.05)
    time.sleep(max(0.0, begin - time.time()))
    calls_before, cpu_before = calls(fake), cpu_seconds(process.pid)
    with churn:
        time.sleep(seconds)
    made, cpu = calls(fake) - calls_before, cpu_seconds(process.pid) - cpu_before
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    return made * 60 / seconds, cpu * 60 / seconds


def poll_forever(cluster_pk: int, every: float) -> None:
    """A polling console: every `every` seconds (on the wall clock's multiples), a GET of each
    instance's VM, and its state settled when the VM's status moves it."""
    cluster = Cluster.objects.get(pk=cluster_pk)
    settler = ClusterWatch(cluster, api_client(cluster_access(cluster), WORK / "run" / "ca"))
    custom = settler.custom
    polling = threading.Event()  # a round under way: SIGTERM ends it after its current GET

    def end(*_: object) -> None:
        if not polling.is_set():
            raise SystemExit(0)
        polling.clear()

    signal.signal(signal.SIGTERM, end)
    while True:
        time.sleep(every - time.time() % every)
        polling.set()
        for instance in Instance.objects.filter(cluster=cluster).select_related("project"):
            if not polling.is_set():
                return
            vm = custom.get_namespaced_custom_object(
                *KUBEVIRT, cluster.namespace_for(instance.project.slug), "virtualmachines",
                instance.machine_id, _request_timeout=TIMEOUT,
            )  # fmt: skip
            assert isinstance(vm, dict)
            if (wanted := _wanted(instance, vm)) is not None:
                settler._settle(instance, wanted, vm["status"]["printableStatus"])
        if not polling.is_set():
            return
        polling.clear()


def tracking(fake, cluster: Cluster, instance: Instance, args) -> dict[int, dict[str, tuple]]:  # type: ignore[no-untyped-def]
    from tests.fakes.kubevirt.store import BY_KIND

    namespace = cluster.namespace_for(instance.project.slug)
    vm = fake.store.get(BY_KIND["VirtualMachine"], namespace, instance.machine_id)
    tracked: list[Instance] = []
    results: dict[int, dict[str, tuple]] = {}
    for count in sorted(int(size) for size in args.sizes.split(",")):
        tracked += add_tracked(fake, instance, vm, count - len(tracked))
        names = [one.machine_id for one in tracked]
        results[count] = {}

        watches = fake.requests["watch virtualmachines"]
        process = manage("watch_clusters", log=f"watch-{count}.log")

        def opened(watches: int = watches) -> float | bool:  # listed, then watching: a second on
            return fake.requests["watch virtualmachines"] > watches and time.time() + 1

        churn = Churn(fake, namespace, names, args.changes)
        results[count]["watch"] = (*track(fake, process, opened, args.track, churn), churn.changes)

        gets = fake.requests["get virtualmachines"]
        process = subprocess.Popen(
            [sys.executable, __file__, "--poller", str(cluster.pk), "--poll", str(args.poll)],
            stdout=(WORK / f"poll-{count}.log").open("w"), stderr=subprocess.STDOUT,
        )  # fmt: skip

        def round_read(gets: int = gets, count: int = count) -> float | bool:
            if fake.requests["get virtualmachines"] < gets + count + 1:  # with the template's VM
                return False
            return time.time() + args.poll - time.time() % args.poll - 0.05  # before a round

        churn = Churn(fake, namespace, names, args.changes)
        results[count]["poll"] = (
            *track(fake, process, round_read, args.track, churn),
            churn.changes,
        )
    return results


# ---- the run -----------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--track", type=float, default=30.0, help="seconds of each tracking window")
    parser.add_argument("--poll", type=float, default=10.0, help="the poller's interval, s")
    parser.add_argument("--changes", type=float, default=60.0, help="VM changes a minute")
    parser.add_argument("--sizes", default="10,100,1000", help="instances tracked, in turn")
    parser.add_argument("--poller", type=int, help=argparse.SUPPRESS)  # the child that polls
    args = parser.parse_args()
    if args.poller:
        poll_forever(args.poller, args.poll)
        return
    if not (ROOT / "var/images/demo/initrd.img").exists():
        subprocess.run(["bash", str(ROOT / "scripts/build_demo_image.sh")], check=True)
    call_command("migrate", verbosity=0)
    freeze_startup_objects()  # this process makes the console's requests: as zopday/wsgi.py does
    fake, controller, kernel_image = start_fake()
    processes = start_services(str(settings.ZOPDAY_CLOUD_QUEUE))
    try:
        user = get_user_model().objects.create_user("bench")
        project = project_create(slug="bench", name="Bench", actor=user)
        membership_set(project=project, user=user, role=Role.ADMIN, actor=user)
        cluster = Cluster(name="lab", api_url=fake.url, kernel_image=kernel_image)
        cluster.token = TOKEN
        cluster.save()
        if problem := cluster_check(cluster):
            raise SystemExit(f"the fake cluster: {problem}")
        image = Image.objects.create(
            name="demo", kind=ImageKind.KERNEL, path=str(ROOT / "var/images/demo")
        )
        subnet = subnet_create(
            project=project, actor=user, name="lan", zone="zone-a", cidr_v4="10.66.0.0/24"
        )
        nic = NicRequest(subnet=subnet, ipv4="10.66.0.5")
        request = InstanceRequest(
            name="bench-vm", zone="zone-a", root_image=image, root_size_gb=1, nics=[nic],
            cluster="lab",
        )  # fmt: skip
        instance = instance_create(project=project, actor=user, request=request)
        proxy_port = 20000 + os.getpid() % 20000
        processes += [manage("watch_clusters", log="watch.log"), start_proxy(proxy_port)]
        console = Console(instance, user, proxy_port)

        console.start()  # a first run writes the VM, which the raw side then copies
        console.shutdown()
        raw = Raw(fake.url, cluster.namespace_for(project.slug), "raw-vm")
        raw_vm(fake, cluster.namespace_for(project.slug), instance.machine_id)
        rows = power_runs(fake, console, raw, args.runs)

        stop_processes(processes[2:])  # the tracking part starts its own
        controller.stop()
        tracked = tracking(fake, cluster, instance, args)
    finally:
        controller.stop()
        stop_processes(processes)
        fake.stop()
    report(rows, tracked, args)
    shutil.rmtree(WORK, ignore_errors=True)


def raw_vm(fake, namespace: str, machine_id: str) -> None:  # type: ignore[no-untyped-def]
    """The console's VM copied as "raw-vm": its spec and seed, none of the console's labels,
    and the other zone's node, so its guest runs in a folder of its own."""
    from tests.fakes.kubevirt.store import BY_KIND

    body = copy.deepcopy(fake.store.get(BY_KIND["VirtualMachine"], namespace, machine_id))
    body["metadata"] = {"name": "raw-vm"}
    body.pop("status", None)
    template = body["spec"]["template"]
    template.get("metadata", {}).pop("labels", None)
    template["spec"].setdefault("nodeSelector", {})["topology.kubernetes.io/zone"] = "zone-b"
    body["spec"].pop("dataVolumeTemplates", None)  # the console's, already made
    fake.store.create(BY_KIND["VirtualMachine"], namespace, body)


def report(rows: dict, tracked: dict, args) -> None:  # type: ignore[no-untyped-def]
    print(f"{'':<22}{'console s':>10}{'raw client s':>13}{'ratio':>7}   (median of {args.runs})")
    ratios = {}
    for name, (ours, theirs) in rows.items():
        ratios[name] = statistics.median(ours) / statistics.median(theirs)
        print(f"{name:<22}{statistics.median(ours):>10.3f}{statistics.median(theirs):>13.3f}"
              f"{ratios[name]:>7.2f}")  # fmt: skip
    for name, (ours, theirs) in rows.items():
        for side, runs in (("console", ours), ("raw", theirs)):
            print(f"  {name} {side} runs: " + " ".join(f"{1000 * s:.0f}" for s in runs) + " ms")
    print(f"\ntracking, {args.track:.0f} s each, {args.changes:.0f} VM changes a minute, "
          f"polling every {args.poll:.0f} s:")  # fmt: skip
    print(f"{'instances':>10}{'side':>7}{'API calls/min':>15}{'CPU s/min':>11}{'changes':>9}")
    for count, sides in tracked.items():
        for side, (per_minute, cpu, changes) in sides.items():
            print(f"{count:>10}{side:>7}{per_minute:>15.0f}{cpu:>11.2f}{changes:>9}")
    for name, ratio in ratios.items():
        print(f"figure: kubevirt_{name}_vs_raw_client = {ratio:.2f} x")
    for name, (ours, _) in rows.items():
        print(f"figure: kubevirt_{name} = {statistics.median(ours):.3f} s")
    for count, sides in tracked.items():
        for side, (per_minute, cpu, _) in sides.items():
            suffix = "" if side == "watch" else "_polling"
            print(f"figure: kubevirt_tracking_{count}_api_calls_per_minute{suffix} = "
                  f"{per_minute:.0f} calls/min")  # fmt: skip
            print(f"figure: kubevirt_tracking_{count}_cpu_seconds_per_minute{suffix} = "
                  f"{cpu:.2f} s/min")  # fmt: skip


if __name__ == "__main__":
    main()
