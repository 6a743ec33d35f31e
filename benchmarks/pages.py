"""Server time of the instance pages at 100, 1,000 and 10,000 instances, and under load.

Seeds one fresh database (SQLite in a temporary run folder, or DATABASE_URL) with three projects
of 100, 1,000 and 10,000 instances (11,100 in all), then, for each project, times Django's
request handling in-process for the instance list (50 a page), the details page and the list API,
next to a minimal view rendering a 50-row template (the baseline): median and p95, the ratio to the
baseline and the SQL queries of one request. Then serves the same URLs with gunicorn and sends
them from 20 concurrent clients on this machine: requests per second and p99 latency.

    python benchmarks/pages.py [--sizes 100,1000,10000] [--requests 200] [--clients 20]
        [--load-requests 1000] [--workers 5] [--profile]
"""

import argparse
import asyncio
import cProfile
import os
import pstats
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ZOPDAY_RUN_DIR", tempfile.mkdtemp(prefix="zopday-bench-"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zopday.settings")
os.environ["ZOPDAY_LOG_LEVEL"] = "ERROR"
os.environ["ZOPDAY_DEBUG"] = "false"  # as deployed: cached template loaders, no debug context

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.cache import cache  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.template import engines  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.urls import include, path  # noqa: E402

from instances.choices import DiskRole, ImageKind, PowerState, Role  # noqa: E402
from instances.models import (  # noqa: E402
    Disk,
    Image,
    Instance,
    IPLease,
    Membership,
    NetworkInterface,
    Project,
    Subnet,
)

MINIMAL = engines["django"].from_string(
    "<html><body><table>{% for row in rows %}<tr><td>{{ row.0 }}</td><td>{{ row.1 }}</td>"
    "<td>{{ row.2 }}</td></tr>{% endfor %}</table></body></html>"
)
PAGES = ("instance_list", "instance_detail", "instance_list_api")


def minimal_view(request: HttpRequest) -> HttpResponse:
    rows = [(f"instance-{n}", "running", f"10.0.0.{n}") for n in range(50)]
    return HttpResponse(MINIMAL.render({"rows": rows}, request))


urlpatterns = [path("bench/minimal/", minimal_view), path("", include("zopday.urls"))]
BENCH_SETTINGS = {"ROOT_URLCONF": __name__, "DEBUG": False}


def seed(sizes: list[int]) -> None:
    """Bulk-create a project per size (`n100`, ...) with its subnet, instances, root disks, NICs
    and leases; the user is an operator in each."""
    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    image = Image.objects.create(name="bench", kind=ImageKind.KERNEL, path="demo")
    states = [PowerState.RUNNING, PowerState.STOPPED, PowerState.RUNNING, PowerState.FAILED]
    mac = 0
    for size in sizes:
        project = Project.objects.create(slug=f"n{size}", name=f"n{size}")
        Membership.objects.create(project=project, user=user, role=Role.OPERATOR)
        subnet = Subnet.objects.create(
            project=project, name="net", zone="local-1a", cidr_v4="10.0.0.0/16", gateway="10.0.0.1"
        )
        instances = Instance.objects.bulk_create(
            Instance(project=project, name=f"vm-{n:05d}", zone="local-1a", initial_password="x",
                     power_state=states[n % 4], vcpus=2, memory_gb=4)
            for n in range(size)
        )  # fmt: skip
        Disk.objects.bulk_create(
            Disk(project=project, zone="local-1a", instance=i, name=f"{i.name}-root",
                 role=DiskRole.ROOT, image=image, size_gb=10)
            for i in instances
        )  # fmt: skip
        nics = []
        for n, instance in enumerate(instances):
            mac += 1
            nics.append(NetworkInterface(
                instance=instance, subnet=subnet, index=0, ipv4=f"10.0.{n // 250}.{n % 250 + 2}",
                mac="52:54:00:" + ":".join(f"{(mac >> s) & 255:02x}" for s in (16, 8, 0)),
            ))  # fmt: skip
        nics = NetworkInterface.objects.bulk_create(nics)
        IPLease.objects.bulk_create(
            IPLease(subnet=subnet, address=nic.ipv4, nic=nic) for nic in nics
        )


def urls_for(slug: str) -> dict[str, str]:
    """The three pages of a project: its list's first page, its first instance's details."""
    instance = Instance.objects.filter(project__slug=slug).order_by("name").first()
    assert instance is not None
    return {
        "instance_list": f"/projects/{slug}/instances/",
        "instance_detail": f"/projects/{slug}/instances/{instance.pk}/",
        "instance_list_api": f"/api/v1/projects/{slug}/instances?limit=50",
    }


def measure(client: Client, url: str, count: int, cold: bool = False) -> list[float]:
    """Milliseconds of `count` requests; `cold`: each with the cache emptied first (the list's
    rows rendered, as the first viewer of a changed page has them)."""
    client.get(url)  # warm caches and template loading
    times = []
    for _ in range(count):
        if cold:
            cache.clear()
        start = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    return times


def queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def profile(client: Client, url: str, count: int = 20) -> None:
    """Python function calls per request (deterministic, unlike the wall clock) and the top
    functions by own time, over `count` requests."""
    client.get(url)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(count):
        client.get(url)
    profiler.disable()
    stats = pstats.Stats(profiler)
    print(f"--- {url}: {stats.total_calls / count:,.0f} calls a request")  # type: ignore[attr-defined]
    stats.sort_stats("tottime").print_stats(12)


def percentile(values: list[float], n: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[n - 1]


def in_process(client: Client, sizes: list[int], count: int) -> dict[int, dict[str, float]]:
    """Median ratios per size; prints a table of each size's pages."""
    ratios: dict[int, dict[str, float]] = {}
    for size in sizes:
        urls = urls_for(f"n{size}")
        results = {"minimal_view": measure(client, "/bench/minimal/", count)}
        results |= {name: measure(client, url, count) for name, url in urls.items()}
        results["list_rows_uncached"] = measure(client, urls["instance_list"], count, cold=True)
        counts = {name: queries(client, url) for name, url in urls.items()}
        baseline = statistics.median(results["minimal_view"])
        print(f"\n{size:,} instances in the viewed project")
        print(f"{'page':<20}{'median ms':>10}{'p95 ms':>9}{'ratio':>8}{'queries':>9}")
        for name, times in results.items():
            median = statistics.median(times)
            ratio = median / baseline
            print(
                f"{name:<20}{median:>10.2f}{percentile(times, 95):>9.2f}{ratio:>8.2f}"
                f"{counts.get(name, '-'):>9}"
            )
        ratios[size] = {
            name: statistics.median(results[name]) / baseline
            for name in (*PAGES, "list_rows_uncached")
        }
        ratios[size] |= {f"{name}_queries": counts[name] for name in PAGES}
    return ratios


async def fetch(port: int, url: str, cookie: str) -> float:
    """One GET on a new connection (gunicorn's sync workers close each), timed to its last
    byte; returns milliseconds."""
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: sessionid={cookie}\r\n"
        "Connection: close\r\n\r\n".encode()
    )
    response = await reader.read()
    writer.close()
    took = (time.perf_counter() - start) * 1000
    assert response.startswith(b"HTTP/1.1 200"), (url, response[:200])
    return took


async def load(port: int, url: str, cookie: str, clients: int, total: int) -> tuple[float, list]:
    """`clients` clients, each sending its next request once the last was answered, until
    `total` requests were answered; returns requests per second and the latencies."""
    times: list[float] = []
    left = iter(range(total))

    async def client() -> None:
        for _ in left:
            times.append(await fetch(port, url, cookie))

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return total / (time.perf_counter() - start), times


def serve(port: int, workers: int) -> None:
    """Runs gunicorn on this module's URLs (the child process of the load test)."""
    from django.core.wsgi import get_wsgi_application
    from gunicorn.app.base import BaseApplication

    override_settings(**BENCH_SETTINGS).enable()
    application = get_wsgi_application()

    class Server(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            self.cfg.set("bind", f"127.0.0.1:{port}")
            self.cfg.set("workers", workers)
            self.cfg.set("worker_class", "sync")
            self.cfg.set("backlog", 2048)
            self.cfg.set("loglevel", "warning")

        def load(self):  # type: ignore[no-untyped-def]
            return application

    connections.close_all()
    Server().run()


def under_load(args: argparse.Namespace, cookie: str, size: int) -> dict[str, tuple]:
    """Requests per second and p99 (ms) of each page served by gunicorn to `--clients` clients."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port), "--workers", str(args.workers)],
        env=os.environ.copy(),
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("gunicorn did not start") from None
                time.sleep(0.1)
        urls = {"minimal_view": "/bench/minimal/", **urls_for(f"n{size}")}
        del urls["instance_detail"]
        results = {}
        for url in urls.values():  # warm every worker, then measure
            asyncio.run(load(port, url, cookie, args.clients, args.clients * 5))
        for name, url in urls.items():
            rps, times = asyncio.run(load(port, url, cookie, args.clients, args.load_requests))
            results[name] = (rps, statistics.median(times), percentile(times, 99))
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(
        f"\nUnder load: gunicorn, {args.workers} sync workers, {args.clients} clients, "
        f"{args.load_requests} requests a page, {size:,} instances in the project"
    )
    print(f"{'page':<20}{'req/s':>9}{'median ms':>11}{'p99 ms':>9}")
    for name, (rps, median, p99) in results.items():
        print(f"{name:<20}{rps:>9.1f}{median:>11.1f}{p99:>9.1f}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--load-requests", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1) + 1)
    parser.add_argument("--profile", action="store_true", help="cProfile the largest size's pages")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve, args.workers)
    sizes = [int(size) for size in args.sizes.split(",")]

    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    seed(sizes)
    took = time.perf_counter() - started
    print(f"seeded {Instance.objects.count():,} instances in {len(sizes)} projects ({took:.1f} s)")

    with override_settings(**BENCH_SETTINGS, ALLOWED_HOSTS=["testserver"]):
        client = Client()
        client.login(username="bench", password="bench-password-1")
        if args.profile:
            for url in ["/bench/minimal/", *urls_for(f"n{sizes[-1]}").values()]:
                profile(client, url)
            return
        ratios = in_process(client, sizes, args.requests)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    connections.close_all()
    loaded = under_load(args, cookie, sizes[-1])

    largest = ratios[sizes[-1]]
    for name in PAGES:
        print(f"figure: {name}_vs_minimal_view = {largest[name]:.2f} x")
    for name in PAGES:
        print(f"figure: {name}_queries = {largest[name + '_queries']} queries")
    for size in sizes:
        for name in PAGES:
            print(f"figure: {name}_vs_minimal_view_{size} = {ratios[size][name]:.2f} x")
        print(f"figure: instance_list_uncached_rows_vs_minimal_view_{size} = "
              f"{ratios[size]['list_rows_uncached']:.2f} x")  # fmt: skip
    for name, (rps, _, p99) in loaded.items():
        print(f"figure: {name}_rps_{args.clients}_clients = {rps:.1f} req/s")
        print(f"figure: {name}_p99_ms_{args.clients}_clients = {p99:.1f} ms")


if __name__ == "__main__":
    main()
