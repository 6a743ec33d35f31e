"""Server time of Storage > UserData at the user data cap (256 KiB), as a viewer sees it (redacted).

Seeds one project with an instance per shape of user data at the cap, then times Django's request
handling in-process for: a minimal view rendering the same 256 KiB as plain text in a <pre> (the
baseline), and the user data view of each instance. Then times the redaction alone of 256 KiB
worst-case texts (near-matches of every pattern, one long line, no newlines). Prints medians and
the ratio to the baseline.

    python benchmarks/userdata_view.py [--requests 20]
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
os.environ["ZOPDAY_DEBUG"] = "false"

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.template import engines  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from django.urls import include, path  # noqa: E402

from instances.choices import DiskRole, ImageKind, Role, UserDataMode  # noqa: E402
from instances.models import Disk, Image, Instance, Membership, Project  # noqa: E402
from instances.redaction import text_redacted, user_data_redacted  # noqa: E402
from instances.validators import USER_DATA_MAX_BYTES, parse_cloud_config  # noqa: E402

CAP = USER_DATA_MAX_BYTES
HEAD = "#cloud-config\n"


def filled(head: str, unit: str) -> str:
    return head + unit * ((CAP - len(head.encode())) // len(unit.encode()))


DOCUMENTS = {  # valid cloud-config at the cap, each as many bytes as fit
    "file_block": filled(HEAD + "write_files:\n- path: /etc/app.conf\n  content: |\n",
                         "    listen 8080; api_token: abc123; a line of the app's settings\n"),
    "long_line": HEAD + "runcmd:\n- '" + "x" * (CAP - 40) + "'\n",
    "many_commands": filled(HEAD + "runcmd:\n", "- echo hello > /tmp/greeting\n"),
    "many_credentials": filled(HEAD + "runcmd:\n", "- mysql -u app -pS3cret -e 'select 1'\n"),
}  # fmt: skip
WORST_TEXTS = {  # 256 KiB each, no newline
    name: unit * (CAP // len(unit))
    for name, unit in {
        "dashes": "-", "hyphenated": "a-", "keywords": "password", "keys": "token=",
        "flags": "--passw ", "open_quotes": 'secret="', "mysql": "mysql ", "curl": "curl -u ",
        "redis": "redis-cli -a ", "pem": "-----BEGIN RSA PRIVATE KEY-----",
        "echo": "echo | sudo ", "urls": "a://b:", "htpasswd": "htpasswd -b ",
    }.items()
}  # fmt: skip
PLAIN = engines["django"].from_string("<html><body><pre>{{ text }}</pre></body></html>")


def plain_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse(PLAIN.render({"text": DOCUMENTS["file_block"]}, request))


urlpatterns = [path("bench/plain/", plain_view), path("", include("zopday.urls"))]


def seed() -> dict[str, str]:
    viewer = get_user_model().objects.create_user("bench", password="bench-password-1")
    project = Project.objects.create(slug="bench", name="bench")
    Membership.objects.create(project=project, user=viewer, role=Role.VIEWER)
    image = Image.objects.create(name="bench", kind=ImageKind.KERNEL, path="demo")
    urls = {}
    for name, document in DOCUMENTS.items():
        assert len(document.encode()) <= CAP, name
        parse_cloud_config(document)  # what the create form would accept
        instance = Instance.objects.create(
            project=project, name=name.replace("_", "-"), zone="local-1a", initial_password="x",
            user_data_mode=UserDataMode.CUSTOM, custom_user_data=document,
        )  # fmt: skip
        Disk.objects.create(
            project=project, zone="local-1a", instance=instance, name=f"{instance.name}-root",
            role=DiskRole.ROOT, image=image,
        )  # fmt: skip
        urls[name] = f"/projects/bench/instances/{instance.pk}/?tab=user-data"
    return urls


def timed(call, count: int) -> float:  # type: ignore[no-untyped-def]
    call()  # warm up
    times = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    urls = seed()
    with override_settings(ROOT_URLCONF=__name__, DEBUG=False, ALLOWED_HOSTS=["testserver"]):
        client = Client()
        client.login(username="bench", password="bench-password-1")

        def get(url: str):  # type: ignore[no-untyped-def]
            return lambda: client.get(url).status_code == 200 or sys.exit(f"{url} failed")

        baseline = timed(get("/bench/plain/"), args.requests)
        views = {name: timed(get(url), args.requests) for name, url in urls.items()}
    redacted = {name: timed(lambda d=d: user_data_redacted(d), 5) for name, d in DOCUMENTS.items()}
    worst = {name: timed(lambda t=t: text_redacted(t), 3) for name, t in WORST_TEXTS.items()}

    print(f"{'user data view (256 KiB)':<28}{'median ms':>10}{'ratio':>8}{'redaction ms':>14}")
    print(f"{'plain <pre> (baseline)':<28}{baseline:>10.1f}{1:>8.2f}")
    for name, ms in views.items():
        print(f"{name:<28}{ms:>10.1f}{ms / baseline:>8.2f}{redacted[name]:>14.1f}")
    print(f"{'worst-case text (256 KiB)':<28}{'median ms':>10}")
    for name, ms in worst.items():
        print(f"{name:<28}{ms:>10.1f}")
    for name, ms in views.items():
        print(f"figure: userdata_view_{name}_vs_plain_render = {ms / baseline:.2f} x")
        print(f"figure: userdata_view_{name} = {ms:.1f} ms")
        print(f"figure: userdata_view_at_cap_{name} = {ms:.1f} ms")
    print(f"figure: userdata_view_plain_render = {baseline:.1f} ms")
    print(f"figure: redaction_worst_case_text_max = {max(worst.values()):.1f} ms")
    print(f"figure: redaction_worst_case_text_median = {statistics.median(worst.values()):.1f} ms")


if __name__ == "__main__":
    main()
