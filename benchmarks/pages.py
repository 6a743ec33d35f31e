"""Server time of the instance pages with 10,000 instances over 50 projects.

Seeds a fresh database (SQLite in a temporary run folder, or DATABASE_URL), then times Django's
request handling in-process for: a minimal view rendering a 50-row template (the baseline), the
instance list (50 a page), the details page and the list API. Prints median and p95 of each, the
ratio to the baseline, and the SQL queries per page measured with 20 and with 200 instances in a
project (the same count means it does not grow with the number of instances).

    python benchmarks/pages.py [--projects 50] [--per-project 200] [--requests 200]
"""

import argparse
import os
import statistics
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

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
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


def minimal_view(request: HttpRequest) -> HttpResponse:
    rows = [(f"instance-{n}", "running", f"10.0.0.{n}") for n in range(50)]
    return HttpResponse(MINIMAL.render({"rows": rows}, request))


urlpatterns = [path("bench/minimal/", minimal_view), path("", include("zopday.urls"))]


def seed(projects: int, per_project: int) -> int:
    """Bulk-create the projects, subnets, instances, root disks, NICs and leases, plus one small
    project (`small`, 20 instances) to show that query counts do not depend on size."""
    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    image = Image.objects.create(name="bench", kind=ImageKind.KERNEL, path="demo")
    states = [PowerState.RUNNING, PowerState.STOPPED, PowerState.RUNNING, PowerState.FAILED]
    mac = 0
    for slug, size in [*((f"p{p}", per_project) for p in range(projects)), ("small", 20)]:
        project = Project.objects.create(slug=slug, name=slug)
        Membership.objects.create(project=project, user=user, role=Role.OPERATOR)
        subnet = Subnet.objects.create(
            project=project, name="net", zone="local-1a", cidr_v4="10.0.0.0/16", gateway="10.0.0.1"
        )
        instances = Instance.objects.bulk_create(
            Instance(project=project, name=f"vm-{n:04d}", zone="local-1a", initial_password="x",
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
    return Instance.objects.exclude(project__slug="small").count()


def urls_for(slug: str) -> dict[str, str]:
    instance = Instance.objects.filter(project__slug=slug).order_by("pk").first()
    assert instance is not None
    return {
        "instance_list": f"/projects/{slug}/instances/",
        "instance_detail": f"/projects/{slug}/instances/{instance.pk}/",
        "instance_list_api": f"/api/v1/projects/{slug}/instances?limit=50",
    }


def measure(client: Client, url: str, count: int) -> list[float]:
    client.get(url)  # warm caches and template loading
    times = []
    for _ in range(count):
        start = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    return times


def queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[18]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--projects", type=int, default=50)
    parser.add_argument("--per-project", type=int, default=200)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()

    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    total = seed(args.projects, args.per_project)
    took = time.perf_counter() - started
    print(f"seeded {total} instances in {args.projects} projects ({took:.1f} s)")

    with override_settings(ROOT_URLCONF=__name__, DEBUG=False, ALLOWED_HOSTS=["testserver"]):
        client = Client()
        client.login(username="bench", password="bench-password-1")
        pages = {"minimal_view": "/bench/minimal/", **urls_for("p0")}
        results = {name: measure(client, url, args.requests) for name, url in pages.items()}
        small = urls_for("small")
        counts = {
            name: (queries(client, small[name]), queries(client, url))
            for name, url in urls_for("p0").items()
        }

    baseline = statistics.median(results["minimal_view"])
    header = "queries (20 / 200 instances)"
    print(f"{'page':<20}{'median ms':>10}{'p95 ms':>9}{'ratio':>8}{header:>31}")
    for name, times in results.items():
        q = counts.get(name)
        median = statistics.median(times)
        query_text = f"{q[0]} / {q[1]}" if q else "-"
        ratio = median / baseline
        print(f"{name:<20}{median:>10.2f}{p95(times):>9.2f}{ratio:>8.2f}{query_text:>31}")
    for name in ("instance_list", "instance_detail", "instance_list_api"):
        ratio = statistics.median(results[name]) / baseline
        print(f"figure: {name}_vs_minimal_view = {ratio:.2f} x")
    for name in ("instance_list", "instance_detail", "instance_list_api"):
        print(f"figure: {name}_queries = {counts[name][1]} queries")


if __name__ == "__main__":
    main()
