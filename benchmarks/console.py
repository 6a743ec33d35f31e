"""The console proxy next to websockify and a direct socket, to one loopback echo backend.

One run measures, with the same minimal websocket client for both proxies, the targets taking
turns (so a change in the machine's load hits them alike):
- 1 KiB echo round trips (p50, p99 of ROUNDS after a warm-up), one at a time;
- bulk throughput: BULK MiB of 64 KiB messages echoed back, sent and read concurrently
  (median of 3 runs);
- memory per idle session: the proxy's PSS with SESSIONS idle sessions open, minus before, over
  SESSIONS (websockify: the PSS of its whole process tree, as it forks per connection).
The backend is an asyncio echo server on a unix socket (like QEMU's console chardevs); the direct
baseline talks to it without any proxy. Our proxy runs as in production, with everything on:
each websocket brings a fresh single-use ticket and a Django session cookie, is admitted through
the database (SQLite here), joins a fan-out hub (one per machine: each session gets its own
machine, as websockify opens one backend connection per session) and is recorded to an asciicast
file. websockify 0.13 (from pip) runs in its default mode, with `--unix-target`. Where socat is
installed, a socat relay (TCP to the unix socket, in C, no websocket) takes its turns too: the
cost of one more hop on its own, with nothing done in it.

Then IDLE (10,000) sessions at once on the same proxy process, from one asyncio client in a
thread that answers the proxy's pings: each has its own ticket (minted in one INSERT) and they
share fan-out hubs two to a machine (5,000 backend connections: one per session would pass the
20,000 descriptors a process may hold here). It reports KiB per session (PSS), sessions
admitted per second, and the p50/p99 of one more, active, session's 1 KiB round trips meanwhile.

    python benchmarks/console.py [--rounds 2000] [--bulk 128] [--sessions 500]
        [--idle-sessions 10000] [--profile-proxy FILE]

It ends with `figure:` lines (ratios against websockify and the direct socket, same run).
"""

import argparse
import asyncio
import base64
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ORIGIN = "http://localhost:8000"
PAYLOAD = bytes(range(32, 127)) * 1000  # printable, like console output
BULK_MESSAGE = 64 * 1024
VIEWERS_PER_MACHINE = 2  # the 10,000 idle sessions share fan-out hubs two by two


def setup_django(work: Path) -> None:
    os.environ.update(
        ZOPDAY_RUN_DIR=str(work / "run"),
        DJANGO_SETTINGS_MODULE="zopday.settings",
        ZOPDAY_LOG_LEVEL="WARNING",
        CONSOLE_TICKET_SECONDS="60",
    )
    os.environ.pop("DATABASE_URL", None)
    import django

    django.setup()


# ---- processes the benchmark starts (this script in another mode) ----------------------------


def serve_echo(path: str) -> None:

    class Echo(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.transport.write(data)  # type: ignore[attr-defined]

    async def main() -> None:
        await asyncio.get_running_loop().create_unix_server(Echo, path, backlog=1024)
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def serve_proxy(work: str, port: int, echo: str, profile: str = "") -> None:
    setup_django(Path(work))
    import signal

    if profile:  # --profile-proxy: cProfile the proxy, written out when the run stops it
        import cProfile

        profiler = cProfile.Profile()

        def dump(*_: object) -> None:
            profiler.disable()
            profiler.dump_stats(profile)
            os._exit(0)

        signal.signal(signal.SIGTERM, dump)
        profiler.enable()

    from instances.consoles.proxy import ConsoleProxy, run_forever

    serial_log = Path(work) / "serial.log"
    serial_log.touch()

    class EchoLocator:
        def socket(self, backend: str, machine_id: str, socket_kind: str) -> Path:
            return Path(echo)

        def serial_log(self, backend: str, machine_id: str) -> Path | None:
            return serial_log

    async def main() -> None:
        stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        print("ready", flush=True)
        await run_forever(
            ConsoleProxy(allowed_origins=[ORIGIN], locator=EchoLocator()), "127.0.0.1", port, stop
        )

    asyncio.run(main())


def start(argv: list[str], what: str) -> subprocess.Popen:
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        raise RuntimeError(f"{what} did not start")
    return process


def wait_for_port(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def pss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def process_tree(pid: int) -> list[int]:
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        for child in children:
            pids += process_tree(int(child))
    return pids


# ---- a minimal websocket client, the same for both proxies ----------------------------------


def masked_frame(payload: bytes, opcode: int = 2) -> bytes:
    """A client frame with a fixed mask, built once and sent many times."""
    mask = b"\x1f\x2e\x3d\x4c"
    length = len(payload)
    if length < 126:
        header = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
    elif length < 65536:
        header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
    else:
        header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
    from websockets.frames import apply_mask

    return header + mask + apply_mask(payload, mask)


class Client:
    """A blocking websocket connection: sends prebuilt frames, counts binary payload bytes,
    skips text frames (the proxy's control messages) and answers pings."""

    def __init__(self, port: int, *, protocols: list[str], cookie: str = "") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port, self.protocols, self.cookie = port, protocols, cookie
        self.buffer = bytearray()

    def open(self, path: str) -> "Client":
        self.sock.sendall(request_text(self.port, self.protocols, self.cookie, path))
        while b"\r\n\r\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("closed during the handshake")
            self.buffer += chunk
        head, _, rest = bytes(self.buffer).partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise RuntimeError(head.decode(errors="replace").splitlines()[0])
        self.buffer = bytearray(rest)
        return self

    def _fill(self, size: int) -> None:
        while len(self.buffer) < size:
            chunk = self.sock.recv(262144)
            if not chunk:
                raise RuntimeError("connection closed")
            self.buffer += chunk

    def read_binary(self, want: int) -> int:
        """Read frames until `want` bytes of binary payload have arrived."""
        got = 0
        while got < want:
            self._fill(2)
            first, second = self.buffer[0], self.buffer[1]
            length, offset = second & 0x7F, 2
            if length == 126:
                self._fill(4)
                length, offset = struct.unpack_from("!H", self.buffer, 2)[0], 4
            elif length == 127:
                self._fill(10)
                length, offset = struct.unpack_from("!Q", self.buffer, 2)[0], 10
            self._fill(offset + length)
            opcode = first & 0x0F
            payload = bytes(self.buffer[offset : offset + length])
            del self.buffer[: offset + length]
            if opcode == 2 or opcode == 0:
                got += length
            elif opcode == 9:
                self.sock.sendall(masked_frame(payload, opcode=10))
            elif opcode == 8:
                raise RuntimeError(f"closed by the server: {payload[2:].decode(errors='replace')}")
        return got

    def close(self) -> None:
        self.sock.close()


class DirectClient:
    """The baseline: the echo backend's unix socket itself."""

    def __init__(self, path: str, relay_port: int = 0) -> None:
        if relay_port:  # the reference: a TCP port that socat relays to that socket
            self.sock = socket.create_connection(("127.0.0.1", relay_port))
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        else:
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.connect(path)

    def read_binary(self, want: int) -> int:
        got = 0
        while got < want:
            chunk = self.sock.recv(262144)
            if not chunk:
                raise RuntimeError("closed")
            got += len(chunk)
        return got

    def close(self) -> None:
        self.sock.close()


def round_trips(client: Client | DirectClient, frame: bytes, size: int, rounds: int) -> list[float]:
    times = []
    for i in range(rounds + rounds // 10):
        started = time.perf_counter()
        client.sock.sendall(frame)
        client.read_binary(size)
        if i >= rounds // 10:
            times.append(time.perf_counter() - started)
    return sorted(times)


def bulk(client: Client | DirectClient, frame: bytes, size: int, total: int) -> float:
    count = total // size

    def send() -> None:
        for _ in range(count):
            client.sock.sendall(frame)

    started = time.perf_counter()
    sender = threading.Thread(target=send)
    sender.start()
    client.read_binary(count * size)
    elapsed = time.perf_counter() - started
    sender.join()
    return count * size / elapsed / 1e6


# ---- the measurements -----------------------------------------------------------------------


class Scene:
    """The database side of our proxy: a user with a session, and running instances."""

    def __init__(self, sessions: int) -> None:
        from django.contrib.auth import get_user_model
        from django.core.management import call_command
        from django.test import Client as DjangoClient

        from instances.choices import Role
        from instances.models import Instance, Membership, Project

        call_command("migrate", verbosity=0)
        user = get_user_model().objects.create_user("bench", password="unused-password-1")
        project = Project.objects.create(slug="bench", name="Bench")
        Membership.objects.create(project=project, user=user, role=Role.OPERATOR)
        Instance.objects.bulk_create(
            Instance(project=project, name=f"vm-{n}", zone="local-1a", power_state="running")
            for n in range(sessions + 2)
        )
        self.user = user
        self.user_project = project
        self.instances = list(Instance.objects.order_by("pk"))
        browser = DjangoClient()
        browser.force_login(user)
        from django.conf import settings

        self.cookie = (
            f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}"
        )

    def ticket(self, instance: object) -> str:
        from instances.access import project_role
        from instances.consoles.registry import CONSOLE_KINDS
        from instances.consoles.tickets import SUBPROTOCOL_PREFIX, console_ticket_issue

        _, plaintext = console_ticket_issue(
            user=self.user,
            instance=instance,  # type: ignore[arg-type]
            role=project_role(self.user, instance.project),  # type: ignore[attr-defined]
            kind=CONSOLE_KINDS["serial"],
        )
        return SUBPROTOCOL_PREFIX + plaintext

    def connect(self, port: int, index: int) -> Client:
        instance = self.instances[index]
        client = Client(
            port, protocols=["zopday.console", self.ticket(instance)], cookie=self.cookie
        )
        return client.open(f"{instance.pk}/serial")

    def add_instances(self, count: int) -> list:
        from instances.models import Instance

        first = Instance.objects.order_by("-pk").values_list("pk", flat=True)[0]
        Instance.objects.bulk_create(
            Instance(project=self.user_project, name=f"vm-{first + n}", zone="local-1a",
                     power_state="running")
            for n in range(1, count + 1)
        )  # fmt: skip
        return list(Instance.objects.filter(pk__gt=first).order_by("pk"))

    def bulk_tickets(self, instances: list) -> list[str]:
        """Tickets for many sessions, written in one INSERT (as console_ticket_issue writes
        each), valid for ten minutes so that the last of 10,000 is still fresh when used."""
        import secrets
        from datetime import timedelta

        from django.utils import timezone

        from instances.consoles.tickets import SUBPROTOCOL_PREFIX, ticket_hash
        from instances.models import ConsoleTicket

        plaintexts = [secrets.token_urlsafe(32) for _ in instances]
        expires = timezone.now() + timedelta(minutes=10)
        ConsoleTicket.objects.bulk_create(
            (ConsoleTicket(token_hash=ticket_hash(plaintext), user=self.user, instance=instance,
                           kind="serial", expires_at=expires)
             for plaintext, instance in zip(plaintexts, instances, strict=True)),
            batch_size=2000,
        )  # fmt: skip
        return [SUBPROTOCOL_PREFIX + plaintext for plaintext in plaintexts]

    def wait_sessions_ended(self, count: int) -> None:
        from instances.models import ConsoleSession

        deadline = time.monotonic() + 120
        while ConsoleSession.objects.filter(ended_at__isnull=False).count() < count:
            if time.monotonic() > deadline:
                raise RuntimeError("the proxy did not close its sessions")
            time.sleep(0.1)


def measure(targets: dict, rounds: int, bulk_mib: int, after_bulk: dict) -> dict:
    """Round trips and bulk runs of every target, interleaved (blocks of round trips in turn,
    then one bulk run of each in turn, three times), so a change in the machine's load during
    the run affects every target alike."""
    small, big = masked_frame(PAYLOAD[:1024]), masked_frame(PAYLOAD[:BULK_MESSAGE])
    clients = {name: connect() for name, connect in targets.items()}
    times: dict[str, list[float]] = {name: [] for name in targets}
    blocks = 10
    for _ in range(blocks):
        for name, client in clients.items():
            times[name] += round_trips(client, small, 1024, rounds // blocks)
    for client in clients.values():
        client.close()
    rates: dict[str, list[float]] = {name: [] for name in targets}
    for _ in range(3):
        for name, connect in targets.items():
            client = connect()
            rates[name].append(bulk(client, big, BULK_MESSAGE, bulk_mib * 2**20))
            client.close()
            if name in after_bulk:
                after_bulk[name]()
    results = {}
    for name in targets:
        ordered = sorted(times[name])
        results[name] = {
            "p50": ordered[len(ordered) // 2] * 1e6,
            "p99": ordered[int(len(ordered) * 0.99)] * 1e6,
            "mbps": statistics.median(rates[name]),
        }
    return results


def idle_memory(pids, open_session, sessions: int) -> float:
    """KiB per idle session: PSS with `sessions` open minus before, over `sessions`."""
    warm = [open_session(sessions), open_session(sessions + 1)]
    time.sleep(1)
    before = pss_kib(pids())
    clients = [open_session(n) for n in range(sessions)]
    time.sleep(2)
    after = pss_kib(pids())
    for client in [*clients, *warm]:
        client.close()
    return (after - before) / sessions


# ---- many idle sessions: one asyncio client in a thread of its own --------------------------


class IdleSession:
    """An asyncio protocol holding one idle console websocket: it sends the handshake, sets
    `greeted` when the proxy's first text message (the hub's "hello", sent once the session is
    admitted) arrives, and answers the proxy's pings so that the session stays open."""

    def __init__(self, request: bytes, greeted: "asyncio.Future[float]") -> None:
        self.request, self.greeted = request, greeted
        self.buffer = bytearray()
        self.upgraded = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: "asyncio.Transport") -> None:  # type: ignore[override]
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.upgraded:
            head, found, rest = bytes(self.buffer).partition(b"\r\n\r\n")
            if not found:
                return
            if not head.startswith(b"HTTP/1.1 101"):
                return self._fail(head.decode(errors="replace").splitlines()[0])
            self.upgraded, self.buffer = True, bytearray(rest)
        while len(self.buffer) >= 2:
            length, offset = self.buffer[1] & 0x7F, 2
            if length == 126:
                if len(self.buffer) < 4:
                    return
                length, offset = struct.unpack_from("!H", self.buffer, 2)[0], 4
            elif length == 127:
                if len(self.buffer) < 10:
                    return
                length, offset = struct.unpack_from("!Q", self.buffer, 2)[0], 10
            if len(self.buffer) < offset + length:
                return
            opcode = self.buffer[0] & 0x0F
            payload = bytes(self.buffer[offset : offset + length])
            del self.buffer[: offset + length]
            if opcode == 1 and not self.greeted.done():
                self.greeted.set_result(time.perf_counter())
            elif opcode == 9 and self.transport is not None:
                self.transport.write(masked_frame(payload, opcode=10))
            elif opcode == 8:
                self._fail(f"closed by the server: {payload[2:].decode(errors='replace')}")

    def _fail(self, why: str) -> None:
        if not self.greeted.done():
            self.greeted.set_exception(RuntimeError(why))
        if self.transport is not None:
            self.transport.close()

    def eof_received(self) -> None:
        self._fail("closed by the server")

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.greeted.done():
            self.greeted.set_exception(RuntimeError(f"connection lost: {exc}"))


class IdleCrowd:
    """Many idle sessions held by one event loop in a background thread (which also answers
    the proxy's pings while the main thread measures)."""

    def __init__(self) -> None:

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.transports: list = []

    def open(self, port: int, cookie: str, paths_and_tickets: list[tuple[str, str]],
             in_flight: int = 64) -> float:  # fmt: skip
        """Open every session, at most `in_flight` handshakes at a time; seconds taken."""

        async def run() -> float:
            gate = asyncio.Semaphore(in_flight)
            loop = asyncio.get_running_loop()

            async def one(path: str, ticket: str) -> None:
                async with gate:
                    request = request_text(port, ["zopday.console", ticket], cookie, path)
                    greeted: asyncio.Future[float] = loop.create_future()
                    transport, _ = await loop.create_connection(
                        lambda: IdleSession(request, greeted),
                        "127.0.0.1",
                        port,  # type: ignore[arg-type,return-value]
                    )
                    self.transports.append(transport)
                    await greeted

            started = time.perf_counter()
            await asyncio.gather(*(one(path, ticket) for path, ticket in paths_and_tickets))
            return time.perf_counter() - started

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result()

    def close(self) -> None:
        def close_all() -> None:
            for transport in self.transports:
                transport.abort()
            self.loop.stop()

        self.loop.call_soon_threadsafe(close_all)
        self.thread.join(timeout=30)


def request_text(port: int, protocols: list[str], cookie: str, path: str) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET /consoles/{path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        f"Origin: {ORIGIN}",
    ]
    if protocols:
        lines.append("Sec-WebSocket-Protocol: " + ", ".join(protocols))
    if cookie:
        lines.append(f"Cookie: {cookie}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def many_idle(scene: "Scene", port: int, proxy_pid: int, count: int, rounds: int) -> dict:
    """`count` idle sessions on one proxy (VIEWERS_PER_MACHINE to a machine, so fan-out hubs
    are shared as on a console several people watch): KiB per session, sessions admitted per
    second, and the round trips of one more, active, session on a machine of its own."""
    machines = scene.add_instances(max(1, count // VIEWERS_PER_MACHINE) + 1)
    active_instance, machines = machines[0], machines[1:]
    targets = [machines[n % len(machines)] for n in range(count)]
    tickets = scene.bulk_tickets(targets)
    crowd = IdleCrowd()
    try:
        warm = [(f"{machine.pk}/serial", ticket) for machine, ticket in
                zip(targets[:50], scene.bulk_tickets(targets[:50]), strict=True)]  # fmt: skip
        crowd.open(port, scene.cookie, warm)  # the proxy's first sessions warm its caches
        time.sleep(1)
        before = pss_kib([proxy_pid])
        seconds = crowd.open(
            port, scene.cookie,
            [(f"{machine.pk}/serial", ticket) for machine, ticket in
             zip(targets, tickets, strict=True)],
        )  # fmt: skip
        time.sleep(2)
        after = pss_kib([proxy_pid])
        active = Client(
            port, protocols=["zopday.console", scene.ticket(active_instance)], cookie=scene.cookie
        ).open(f"{active_instance.pk}/serial")
        frame = masked_frame(PAYLOAD[:1024])
        times = round_trips(active, frame, 1024, rounds)
        active.close()
    finally:
        crowd.close()
    return {
        "kib": (after - before) / count,
        "per_second": count / seconds,
        "seconds": seconds,
        "p50": times[len(times) // 2] * 1e6,
        "p99": times[int(len(times) * 0.99)] * 1e6,
        "machines": len(machines),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--bulk", type=int, default=128, help="MiB per bulk run")
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument(
        "--idle-sessions", type=int, default=10_000, help="concurrent idle sessions (0: skip)"
    )
    parser.add_argument("--profile-proxy", metavar="FILE", help="cProfile the proxy into FILE")
    parser.add_argument("--serve-proxy", nargs=3, metavar=("WORK", "PORT", "ECHO"))
    parser.add_argument("--serve-echo", metavar="SOCKET")
    args = parser.parse_args()
    if args.serve_echo:
        return serve_echo(args.serve_echo)
    if args.serve_proxy:
        work, port, echo = args.serve_proxy
        return serve_proxy(work, int(port), echo, os.environ.get("CONSOLE_BENCH_PROFILE", ""))

    work = Path(tempfile.mkdtemp(prefix="zcb", dir="/tmp"))
    setup_django(work)
    processes: list[subprocess.Popen] = []
    try:
        echo = str(work / "echo.sock")
        me = [sys.executable, __file__]
        processes.append(start([*me, "--serve-echo", echo], "the echo backend"))
        scene = Scene(args.sessions)
        ours_port, websockify_port = free_port(), free_port()
        if args.profile_proxy:
            os.environ["CONSOLE_BENCH_PROFILE"] = str(Path(args.profile_proxy).resolve())
        proxy = start([*me, "--serve-proxy", str(work), str(ours_port), echo], "the proxy")
        processes.append(proxy)
        websockify = subprocess.Popen(
            [sys.executable, "-m", "websockify", f"--unix-target={echo}",
             f"127.0.0.1:{websockify_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        processes.append(websockify)
        wait_for_port(ours_port)
        wait_for_port(websockify_port)
        print(f"{os.cpu_count()} CPUs; {args.rounds} round trips of 1 KiB, "
              f"3 × {args.bulk} MiB bulk, {args.sessions} idle sessions, then "
              f"{args.idle_sessions} at once")  # fmt: skip

        ended = [1]  # the round-trip session
        counter = iter(range(10**6))

        def after_bulk() -> None:  # let the proxy finish its recording before going on
            ended[0] += 1
            scene.wait_sessions_ended(ended[0])

        targets = {
            "direct socket": lambda: DirectClient(echo),
            "websockify": lambda: Client(websockify_port, protocols=["binary"]).open("x/y"),
            "zopday proxy": lambda: scene.connect(ours_port, next(counter) % 2),
        }
        if shutil.which("socat"):  # the floor of any relay: one hop in C, no websocket
            relay_port = free_port()
            processes.append(subprocess.Popen(
                ["socat", "-b262144", f"TCP-LISTEN:{relay_port},reuseaddr,fork,nodelay",
                 f"UNIX-CONNECT:{echo}"], stderr=subprocess.DEVNULL,
            ))  # fmt: skip
            wait_for_port(relay_port)
            targets["socat relay"] = lambda: DirectClient(echo, relay_port)
        results = measure(
            targets,
            args.rounds,
            args.bulk,
            {"zopday proxy": after_bulk},
        )
        print(f"{'':16} {'p50 µs':>9} {'p99 µs':>9} {'bulk MB/s':>10}")
        for name, result in results.items():
            print(f"{name:16} {result['p50']:9.0f} {result['p99']:9.0f} {result['mbps']:10.0f}")

        ours_memory = idle_memory(
            lambda: [proxy.pid],
            lambda n: scene.connect(ours_port, n + 2 if n < args.sessions else n - args.sessions),
            args.sessions,
        )
        websockify_memory = idle_memory(
            lambda: process_tree(websockify.pid),
            lambda n: Client(websockify_port, protocols=["binary"]).open("x/y"),
            args.sessions,
        )
        print(f"memory per idle session ({args.sessions} open, PSS): zopday proxy "
              f"{ours_memory:.1f} KiB, websockify {websockify_memory:.1f} KiB")  # fmt: skip
        crowd = None
        if args.idle_sessions:
            crowd = many_idle(scene, ours_port, proxy.pid, args.idle_sessions, args.rounds)
            print(f"{args.idle_sessions} idle sessions on one proxy ({crowd['machines']} machines, "
                  f"{VIEWERS_PER_MACHINE} viewers each): {crowd['kib']:.1f} KiB each, admitted "
                  f"in {crowd['seconds']:.1f} s ({crowd['per_second']:.0f}/s); one active "
                  f"session's 1 KiB round trip meanwhile: p50 {crowd['p50']:.0f} µs, "
                  f"p99 {crowd['p99']:.0f} µs")  # fmt: skip
        ours, theirs = results["zopday proxy"], results["websockify"]
        direct = results["direct socket"]
        print(f"figure: console_throughput_vs_websockify = {ours['mbps'] / theirs['mbps']:.2f} x")
        print(f"figure: console_p50_vs_websockify = {ours['p50'] / theirs['p50']:.2f} x")
        print(f"figure: console_p99_vs_websockify = {ours['p99'] / theirs['p99']:.2f} x")
        print(f"figure: console_throughput = {ours['mbps']:.0f} MB/s")
        print(f"figure: console_p50_round_trip = {ours['p50']:.0f} us")
        print(f"figure: console_idle_session_memory = {ours_memory:.1f} KiB")
        print(f"figure: websockify_idle_session_memory = {websockify_memory:.1f} KiB")
        print(f"figure: console_throughput_vs_direct_socket = "
              f"{ours['mbps'] / direct['mbps']:.2f} x")  # fmt: skip
        print(f"figure: console_p50_vs_direct_socket = {ours['p50'] / direct['p50']:.2f} x")
        if "socat relay" in results:
            relay = results["socat relay"]
            speed, p50 = relay["mbps"] / direct["mbps"], relay["p50"] / direct["p50"]
            print(f"(socat relay, no websocket: {speed:.2f} x the direct socket's throughput, "
                  f"{p50:.2f} x its p50)")  # fmt: skip
        if crowd is not None:
            print(f"figure: console_idle_session_memory_10k = {crowd['kib']:.1f} KiB")
            print(f"figure: console_sessions_admitted_per_second = {crowd['per_second']:.0f} /s")
            print(f"figure: console_p99_round_trip_10k_idle = {crowd['p99']:.0f} us")
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
