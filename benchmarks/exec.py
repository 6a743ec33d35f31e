"""Exec on an AWS VM through the console proxy, next to a plain client of the same agent.

Both talk to the Session Manager fake of tests/fakes/ssm (in front of a moto server, each in a
process of its own), whose agent runs a real shell in a pseudo-terminal; each client gets a
session of its own. The plain client is the
data-channel client alone (provisioning.clouds.aws.ssm_channel) in this process; the proxied one
is a browser's websocket to `manage.py consoleproxy`-style proxy in another process, with its
ticket, audit record, fan-out hub and asciicast recording, which speaks the same channel. One run
measures, taking turns:
- keystroke round trips: one byte typed, until the shell's echo of it is back (p50, p99);
- throughput: the shell prints BULK MiB (`head -c ... | tr`), from the command to its end marker
  (median of 3 runs).

    python benchmarks/exec.py [--rounds 400] [--bulk 8]

It ends with `figure:` lines (ratios of the proxied path to the plain client in the same run).
"""

import argparse
import asyncio
import statistics
import subprocess
import sys
import time

from stack import WORK, start_redis, stop_processes

ORIGIN = "http://localhost:8000"
END = b"END-42"  # printed by `echo END-$((6*7))`: not in the command's own echo


def serve_fake(moto_url: str) -> None:
    """The Session Manager fake in a process of its own, as the cloud is to both clients."""
    from tests.fakes.ssm import SsmFake

    fake = SsmFake(upstream=moto_url, folder=WORK / "ssm").start()
    print(fake.url, flush=True)
    try:
        sys.stdin.read()  # until the benchmark closes it
    finally:
        fake.stop()


def serve_proxy(port: int) -> None:
    """The console proxy, as `manage.py consoleproxy` runs it, on this run's database."""
    from instances.consoles.proxy import ConsoleProxy, run_forever

    async def main() -> None:
        stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        print("ready", flush=True)
        await run_forever(ConsoleProxy(allowed_origins=[ORIGIN]), "127.0.0.1", port, stop)

    asyncio.run(main())


class Screen:
    """What one client was sent, and a way to wait for more of it."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.changed = asyncio.Event()

    def add(self, data: bytes) -> None:
        self.data += data
        self.changed.set()

    async def wait_for(self, text: bytes, start: int, timeout: float = 120) -> None:
        async with asyncio.timeout(timeout):
            while self.data.find(text, start) < 0:
                self.changed.clear()
                await self.changed.wait()


async def round_trips(send, screen: Screen, rounds: int) -> list[float]:  # type: ignore[no-untyped-def]
    times = []
    for number in range(rounds):
        start = len(screen.data)
        began = time.perf_counter()
        await send(b"x")
        await screen.wait_for(b"x", start)
        times.append(time.perf_counter() - began)
        if number % 50 == 49:  # clear the line the shell is editing
            start = len(screen.data)
            await send(b"\x15echo K-$((1+1))\r")
            await screen.wait_for(b"K-2", start)
    return times


async def throughput(send, screen: Screen, mib: int) -> float:  # type: ignore[no-untyped-def]
    """Bytes a second from the command to its end marker."""
    start = len(screen.data)
    began = time.perf_counter()
    await send(f"head -c {mib * 2**20} /dev/zero | tr '\\0' a; echo; echo END-$((6*7))\r".encode())
    await screen.wait_for(END, start)
    return (len(screen.data) - start) / (time.perf_counter() - began)


class Plain:
    """The data-channel client alone, on a session it starts with boto3."""

    def __init__(self, ssm) -> None:  # type: ignore[no-untyped-def]
        self.ssm, self.screen = ssm, Screen()

    async def open(self, target: str) -> None:
        from provisioning.clouds.aws.ssm_channel import SsmChannel, Stream

        started = await asyncio.to_thread(self.ssm.start_session, Target=target)

        async def nothing() -> None: ...

        async def resume() -> Stream:
            raise RuntimeError("no resume in a benchmark")

        self.channel = SsmChannel(
            Stream(started["StreamUrl"], started["TokenValue"]), on_data=self.screen.add,
            on_closed=lambda: None, resume=resume, terminate=nothing,
            checked=False,  # the Session Manager fake, on loopback
        )  # fmt: skip
        await self.channel.open()
        await self.channel.handshaken.wait()
        self.channel.resize(200, 50)
        await self.screen.wait_for(b"$ ", 0)

    async def send(self, data: bytes) -> None:
        self.channel.write(data, sender=None)  # type: ignore[arg-type]


class Proxied:
    """A browser's websocket to the console proxy, with a ticket and a session cookie."""

    def __init__(self, port: int, cookie: str, ticket: str) -> None:
        self.port, self.cookie, self.ticket, self.screen = port, cookie, ticket, Screen()

    async def open(self, instance_id: int) -> None:
        import json

        from websockets.asyncio.client import connect

        self.ws = await connect(
            f"ws://127.0.0.1:{self.port}/consoles/{instance_id}/exec", origin=ORIGIN,  # type: ignore[arg-type]
            subprotocols=["zopday.console", self.ticket],  # type: ignore[list-item]
            additional_headers={"Cookie": self.cookie}, compression=None, max_size=None,
        )  # fmt: skip
        await self.ws.send(json.dumps({"type": "resize", "cols": 200, "rows": 50}))
        self.reader = asyncio.get_running_loop().create_task(self._read())
        await self.screen.wait_for(b"$ ", 0)

    async def _read(self) -> None:
        async for message in self.ws:
            if isinstance(message, bytes):
                self.screen.add(message)

    async def send(self, data: bytes) -> None:
        await self.ws.send(data)


def scene():  # type: ignore[no-untyped-def]
    """Moto, the Session Manager fake, a landed job's VM and a user who may open its Exec."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from instances.choices import Role
    from instances.models import Membership, Project
    from provisioning.infra import InfraConfig
    from provisioning.pipeline import job_run_inline
    from provisioning.services.accounts import account_create
    from provisioning.services.jobs import job_create
    from tests.provisioning.moto import raw_client, start_moto

    call_command("migrate", verbosity=0)
    settings.ZOPDAY_PROVISIONING_POLL_SECONDS = 0.05
    redis = start_redis()  # the steps the job queues go where no worker reads: run here
    moto, moto_url = start_moto(WORK / "moto.log")
    fake = subprocess.Popen(
        [sys.executable, __file__, "--serve-fake", moto_url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert fake.stdout is not None
    fake_url = fake.stdout.readline().strip()
    if not fake_url.startswith("http://127.0.0.1:"):  # never an account at AWS itself
        raise RuntimeError("the Session Manager fake did not start")
    user = get_user_model().objects.create_user("bench", password="unused-password-1")
    project = Project.objects.create(slug="bench", name="Bench")
    Membership.objects.create(project=project, user=user, role=Role.ADMIN)
    account = account_create(
        project=project, actor=None, name="Sandbox AWS", access_key_id="testing",
        secret_access_key="testing", endpoint_url=fake_url, sandbox=True,
    )  # fmt: skip
    job = job_create(
        project=project, account=account, actor=user, name="bench", config=InfraConfig()
    )
    job = job_run_inline(job.pk)
    assert job.status == "ready", f"the job did not land: {job.status}: {job.message}"
    instance = job.instances.get().instance
    browser = Client()
    browser.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}"
    return [fake, moto, redis], user, instance, cookie, raw_client(fake_url, "ssm")


def ticket(user, instance) -> str:  # type: ignore[no-untyped-def]
    from instances.access import project_role
    from instances.consoles.registry import CONSOLE_KINDS
    from instances.consoles.tickets import SUBPROTOCOL_PREFIX, console_ticket_issue

    role = project_role(user, instance.project)
    _, plaintext = console_ticket_issue(
        user=user, instance=instance, role=role, kind=CONSOLE_KINDS["exec"]
    )
    return SUBPROTOCOL_PREFIX + plaintext


async def measure(plain: Plain, proxied: Proxied, rounds: int, mib: int) -> dict:
    clients = {"plain": plain, "proxy": proxied}
    times: dict[str, list[float]] = {name: [] for name in clients}
    for _ in range(4):  # blocks in turn, so a change in load hits both alike
        for name, client in clients.items():
            times[name] += await round_trips(client.send, client.screen, rounds // 4)
    rates: dict[str, list[float]] = {name: [] for name in clients}
    for _ in range(3):
        for name, client in clients.items():
            rates[name].append(await throughput(client.send, client.screen, mib))
    results = {}
    for name in clients:
        ordered = sorted(times[name][5:])  # the first few warm the shell up
        results[name] = {
            "p50": ordered[len(ordered) // 2] * 1e3,
            "p99": ordered[int(len(ordered) * 0.99)] * 1e3,
            "mibps": statistics.median(rates[name]) / 2**20,
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--bulk", type=int, default=8, help="MiB per throughput run")
    parser.add_argument("--serve-proxy", metavar="PORT", type=int)
    parser.add_argument("--serve-fake", metavar="MOTO_URL")
    args = parser.parse_args()
    if args.serve_fake:
        return serve_fake(args.serve_fake)
    if args.serve_proxy:
        return serve_proxy(args.serve_proxy)

    from tests.provisioning.moto import free_port

    processes, user, instance, cookie, ssm = scene()
    port = free_port()
    proxy = subprocess.Popen(
        [sys.executable, __file__, "--serve-proxy", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert proxy.stdout is not None and proxy.stdout.readline().strip() == "ready"

        target = instance.job_link.job.config["vms"][0]["instance_id"]
        proxied = Proxied(port, cookie, ticket(user, instance))

        async def run() -> dict:
            plain = Plain(ssm)
            await plain.open(target)
            await proxied.open(instance.pk)
            results = await measure(plain, proxied, args.rounds, args.bulk)
            await proxied.ws.close()
            plain.channel.close()
            return results

        results = asyncio.run(run())
    finally:
        fake = processes[0]
        assert fake.stdin is not None
        fake.stdin.close()  # the fake ends its shells when told to stop
        fake.wait(30)
        stop_processes([proxy, *processes])
    for name, figures in results.items():
        print(
            f"{name:6} keystroke round trip p50 {figures['p50']:.2f} ms, "
            f"p99 {figures['p99']:.2f} ms; throughput {figures['mibps']:.1f} MiB/s"
        )
    plain, proxied = results["plain"], results["proxy"]
    print(f"figure: exec_p50_vs_plain_client = {proxied['p50'] / plain['p50']:.2f} x")
    print(f"figure: exec_p99_vs_plain_client = {proxied['p99'] / plain['p99']:.2f} x")
    print(f"figure: exec_throughput_vs_plain_client = {proxied['mibps'] / plain['mibps']:.2f} x")


if __name__ == "__main__":
    main()
