"""Throughput of an image import from a URL through the console's path against curl of the same
file from the same local server, in one run.

Makes a qcow2 image of random data, serves it from a threaded http.server on loopback, then takes
turns: `curl -o` of the file, and the console's import (the address probed as a request does,
then the worker's service: download with progress records and SHA-256, qemu-img checks,
registration). Prints medians and their ratio (above 1: the console is slower).

    python benchmarks/url_import.py [--size-mb 256] [--runs 3]
"""

import argparse
import functools
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RUN_DIR = Path(os.environ.setdefault("ZOPDAY_RUN_DIR", tempfile.mkdtemp(prefix="zopday-bench-")))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zopday.settings")
os.environ["ZOPDAY_IMAGES_DIR"] = str(RUN_DIR / "images")
os.environ["ZOPDAY_LOG_LEVEL"] = "ERROR"
os.environ["ZOPDAY_DEBUG"] = "false"

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402

from instances.choices import ImportStatus, Role  # noqa: E402
from instances.models import Image, ImageImport, Membership, Project  # noqa: E402
from instances.services import image_imports  # noqa: E402
from instances.services.image_import_work import image_import_run  # noqa: E402
from instances.services.image_imports import image_import_start  # noqa: E402

# the worker's service runs here, in this process: nothing is sent to a queue
image_imports.send_on_commit = lambda *args, **options: None


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # the probe reads headers only and hangs up: a broken pipe is expected


def make_image(folder: Path, size_mb: int) -> Path:
    raw, image = folder / "bench.raw", folder / "bench.qcow2"
    with raw.open("wb") as file:
        for _ in range(size_mb):
            file.write(os.urandom(1024 * 1024))
    subprocess.run(["qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", str(raw),
                    str(image)], check=True)  # fmt: skip
    raw.unlink()
    return image


def time_curl(url: str, target: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["curl", "-sSf", "-o", str(target), url], check=True)
    elapsed = time.perf_counter() - started
    target.unlink()
    return elapsed


def time_console(project: Project, user: Any, url: str, sha256: str, run: int) -> float:
    started = time.perf_counter()
    image_import = image_import_start(
        project=project, actor=user, name=f"bench-{run}", format="qcow2", url=url, sha256=sha256
    )
    image_import_run(image_import.pk, image_import.attempt)
    elapsed = time.perf_counter() - started
    image_import.refresh_from_db()
    if image_import.status != ImportStatus.DONE:
        raise SystemExit(f"the import failed: {image_import.message}")
    image = Image.objects.get(pk=image_import.image_id or 0)
    image.file.unlink()
    image.delete()
    return elapsed


def url_import_figures(user: Any, project: Project, size_mb: int = 256, runs: int = 3) -> dict:
    """Import and curl of one file, taking turns; the ratio of their medians."""
    from django.conf import settings

    # the file is served on loopback, which imports refuse by default: allowed for this run
    settings.ZOPDAY_EGRESS_BLOCKED_NETWORKS = ["169.254.0.0/16", "fe80::/10"]
    folder = Path(tempfile.mkdtemp(prefix="zopday-serve-"))
    image = make_image(folder, size_mb)
    sha256 = hashlib.sha256(image.read_bytes()).hexdigest()
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/{image.name}"
    file_mb = image.stat().st_size / 1024**2
    print(f"file: {file_mb:.0f} MiB qcow2 at {url}")

    curl, console = [], []
    for run in range(runs):  # the sides take turns, so load weighs on both alike
        curl.append(time_curl(url, RUN_DIR / "curl.out"))
        console.append(time_console(project, user, url, sha256, run))
        print(f"run {run + 1}: curl {curl[-1]:.2f} s, console {console[-1]:.2f} s")
    server.shutdown()
    shutil.rmtree(folder)
    assert not ImageImport.objects.exclude(status=ImportStatus.DONE).exists()
    curl_s, console_s = statistics.median(curl), statistics.median(console)
    print(f"curl: median {curl_s:.2f} s ({file_mb / curl_s:.0f} MiB/s)")
    print(f"console import (probe, download, SHA-256, qemu-img checks, register): median "
          f"{console_s:.2f} s ({file_mb / console_s:.0f} MiB/s)")  # fmt: skip
    return {"url_import_vs_curl": console_s / curl_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    project = Project.objects.create(slug="bench", name="bench")
    Membership.objects.create(project=project, user=user, role=Role.OPERATOR)
    for name, ratio in url_import_figures(user, project, options.size_mb, options.runs).items():
        print(f"figure: {name} = {ratio:.2f} x")


if __name__ == "__main__":
    main()
