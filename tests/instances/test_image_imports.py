"""Images imported from a URL, served by a real HTTP server on loopback: wrong addresses are
refused at the URL field before anything is made; a download that stalls, breaks off, is no
image or has another checksum fails at its field and leaves no image and no file. The worker's
service runs here in the test's process (tests/instances/test_image_imports_worker.py runs
it in a real Celery worker)."""

import hashlib
import html
import socket
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from instances.backends.qemu.images import GIB
from instances.choices import ImageKind, ImportStatus
from instances.models import AuditEvent, Image, ImageImport
from instances.services import image_import_work, image_quota, import_slots
from instances.services.image_import_work import image_import_run, image_imports_sweep
from tests.instances.api.helpers import errors_of
from tests.instances.image_files import fifo_decoy, polyglot, vmdk_descriptor
from tests.instances.test_images import data_file_image, iso, qcow2

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def images_dir(settings, tmp_path, monkeypatch):
    settings.ZOPDAY_IMAGES_DIR = tmp_path / "images"
    settings.ZOPDAY_IMPORT_STALL_SECONDS = 1
    # the heartbeat thread writes on its own connection, which this test's transaction locks out
    monkeypatch.setattr(image_import_work, "HEARTBEAT_SECONDS", 3600)
    return settings.ZOPDAY_IMAGES_DIR


@pytest.fixture(autouse=True)
def unknown_host(monkeypatch):
    """Names under .invalid resolve nowhere, without asking any DNS server."""
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):  # type: ignore[no-untyped-def]
        if isinstance(host, str) and host.endswith(".invalid"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def left_in(images_dir) -> list[str]:
    folder = images_dir / "uploads" / "alpha"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def start(client, project, **fields):
    data = {"name": "noble", "format": "qcow2", "os_type": "linux", "sha256": "", **fields}
    url = reverse("image-url-import", args=[project.slug])
    return client.post(url, {f"import-{key}": value for key, value in data.items()}, follow=True)


def run_latest() -> ImageImport:
    image_import = ImageImport.objects.latest("pk")
    image_import_run(image_import.pk, image_import.attempt)
    image_import.refresh_from_db()
    return image_import


def test_an_operator_imports_a_qcow2_with_its_checksum(
    client_for, project, image_server, images_dir, tmp_path
):
    body = qcow2(tmp_path, size="2G").read_bytes()
    image_server.serve("/noble.qcow2", body)
    page = start(
        client_for("operator"), project, url=image_server.url("/noble.qcow2"),
        sha256=hashlib.sha256(body).hexdigest().upper(),
    ).text  # fmt: skip
    assert "Importing noble: its progress shows below." in page
    assert 'id="import-' in page and "<progress" in page
    image_import = run_latest()
    assert image_import.status == ImportStatus.DONE, image_import.message
    image = Image.objects.get(name="noble", project=project)
    assert (image.kind, image.min_disk_gb, image_import.image) == (ImageKind.QCOW2, 2, image)
    assert image.file.read_bytes() == body
    assert (image_import.bytes_done, image_import.bytes_total) == (len(body), len(body))
    assert left_in(images_dir) == [f"{image.pk}.qcow2"]
    assert AuditEvent.objects.filter(action="image.imported", target_id=str(image.pk)).exists()
    page = client_for("viewer").get(reverse("image-list", args=[project.slug])).text
    assert "Imported as image noble." in page and "<progress" not in page


def test_a_raw_disk_is_converted_to_qcow2_and_an_iso_is_kept_as_it_is(
    client_for, project, image_server, images_dir, tmp_path
):
    image_server.serve("/disk.img", b"\0" * (4 * 1024 * 1024))
    image_server.serve("/tools.iso", iso(tmp_path))
    start(client_for("operator"), project, name="disk", format="raw",
          url=image_server.url("/disk.img"))  # fmt: skip
    assert run_latest().status == ImportStatus.DONE
    start(client_for("operator"), project, name="tools", format="iso",
          url=image_server.url("/tools.iso"))  # fmt: skip
    assert run_latest().status == ImportStatus.DONE
    disk, tools = Image.objects.get(name="disk"), Image.objects.get(name="tools")
    assert (disk.kind, disk.path.endswith(".qcow2")) == (ImageKind.QCOW2, True)
    assert tools.kind == ImageKind.ISO
    assert left_in(images_dir) == sorted([f"{disk.pk}.qcow2", f"{tools.pk}.iso"])


@pytest.mark.parametrize(
    ("where", "fields", "field", "message"),
    [
        ("ftp", {"url": "ftp://example.com/a.qcow2"}, "url",
         "Only http:// and https:// addresses are fetched, not ftp:"),
        ("file", {"url": "file:///etc/passwd"}, "url", "Only http:// and https://"),
        ("unknown", {"url": "http://images.invalid/a.qcow2"}, "url",
         "The host images.invalid is unknown: check the address's host name."),
        ("/missing.qcow2", {}, "url", "The address answers 404 Not Found, not the file"),
        ("/loop", {}, "url", "redirects more than 5 times (a redirect loop?)"),
        ("/huge", {}, "url", "The file is larger than 20 GB, the largest image taken here."),
        ("/over-quota", {}, "url", "would take the project's images past their quota"),
        ("/slow-headers", {}, "url", "stopped sending for 1 s"),
        ("/ok", {"sha256": "abc"}, "sha256", "Give the SHA-256 as 64 hexadecimal digits"),
        ("/ok", {"name": ""}, "name", "This field is required."),
    ],
)  # fmt: skip
def test_a_wrong_address_or_checksum_is_refused_at_its_field_and_nothing_is_made(
    client_for, project, image_server, images_dir, settings, where, fields, field, message
):
    settings.ZOPDAY_PROJECT_IMAGE_QUOTA_GB = 1
    image_server.serve("/ok", b"x")
    image_server.serve("/loop", redirect_to=image_server.url("/loop"))
    image_server.serve("/huge", b"", length=21 * GIB)
    image_server.serve("/over-quota", b"", length=GIB + 1)
    image_server.serve("/slow-headers", b"x", headers_delay=3)
    url = image_server.url(where) if where.startswith("/") else ""
    page = start(client_for("operator"), project, **{"url": url, **fields}).text
    error = page.split(f'id="import-{field}-error">', 1)[1].split("</p>", 1)[0]
    assert message in html.unescape(error)
    assert not ImageImport.objects.exists() and not Image.objects.exists()
    assert left_in(images_dir) == []
    assert image_server.routes["/ok"].sent == 0


@pytest.mark.parametrize(
    ("where", "blocked", "seen"),
    [
        ("/ok", "127.0.0.0/8", "127.0.0.1"),  # this machine's own services
        ("/to-metadata", "127.0.0.2/32", "169.254.169.254"),  # a redirect to a cloud's metadata
        ("/to-other-loopback", "127.0.0.2/32", "127.0.0.2"),  # a redirect to a blocked one
    ],
)
def test_addresses_of_this_machine_or_link_local_ones_are_never_fetched(
    client_for, project, image_server, images_dir, settings, where, blocked, seen
):
    settings.ZOPDAY_EGRESS_BLOCKED_NETWORKS = [blocked, "169.254.0.0/16"]
    image_server.serve("/ok", b"x")
    image_server.serve("/to-metadata", redirect_to="http://169.254.169.254/latest/meta-data/")
    other = image_server.url("/ok").replace("127.0.0.1", "127.0.0.2")
    image_server.serve("/to-other-loopback", redirect_to=other)
    page = start(client_for("operator"), project, url=image_server.url(where)).text
    error = html.unescape(page.split('id="import-url-error">', 1)[1].split("</p>", 1)[0])
    assert f"is {seen}, an address the console does not fetch from" in error
    assert not ImageImport.objects.exists() and not Image.objects.exists()
    assert image_server.routes["/ok"].sent == 0  # nothing asked of a blocked address


@pytest.mark.parametrize(
    ("content", "options", "field", "message"),
    [
        ("text", {}, "url", "This file is not a qcow2 image"),
        ("backed", {}, "url", "depends on another file"),
        ("qcow2", {"sha256": "0" * 64}, "sha256", "check the checksum"),
        ("stall", {}, "url", "stopped sending for 1 s"),
        ("short", {}, "url", "broke the download off before the end"),
        ("qcow2-as-raw", {"format": "raw"}, "url", "This file is a qcow2 image, not a raw disk"),
        ("odd-raw", {"format": "raw"}, "url", "not a whole number of 512-byte sectors"),
        ("iso-and-qcow2", {"format": "iso"}, "url", "This file is a qcow2 image, not an ISO"),
        ("vmdk", {"format": "raw"}, "url", "This file is a VMDK image, not a raw disk: convert"),
        ("vmdk", {"format": "iso"}, "url", "This file is a VMDK image, not an ISO"),
    ],
)  # fmt: skip
def test_a_download_that_goes_wrong_fails_at_its_field_and_leaves_nothing(
    client_for, project, image_server, images_dir, tmp_path, content, options, field, message
):
    good = qcow2(tmp_path).read_bytes()
    bodies = {
        "text": (b"<html>not an image</html>\n", {}),
        "backed": (data_file_image(tmp_path).read_bytes(), {}),
        "qcow2": (good, {}),
        "stall": (good, {"hold_after": 4096}),
        "short": (good[:4096], {"length": len(good)}),
        "qcow2-as-raw": (good, {}),
        "odd-raw": (b"x" * 1000, {}),
        "iso-and-qcow2": (polyglot(tmp_path).read_bytes(), {}),
        "vmdk": (vmdk_descriptor(tmp_path, fifo_decoy(tmp_path)).read_bytes(), {}),
    }
    body, serving = bodies[content]
    image_server.serve("/image", body, **serving)
    start(client_for("operator"), project, url=image_server.url("/image"), **options)
    image_import = run_latest()
    assert image_import.status == ImportStatus.FAILED
    assert (image_import.error_field, message in image_import.message) == (field, True), (
        image_import.message
    )
    assert not Image.objects.exists() and left_in(images_dir) == []
    page = client_for("viewer").get(reverse("image-list", args=[project.slug])).text
    shown = page.split(f'id="import-{image_import.pk}-{field}-error">', 1)[1].split("</p>", 1)
    assert message in html.unescape(shown[0])


def test_a_file_past_the_cap_is_stopped_while_it_arrives_when_no_size_was_announced(
    client_for, project, image_server, images_dir, tmp_path, settings, monkeypatch
):
    image_server.serve("/image", qcow2(tmp_path).read_bytes())
    start(client_for("operator"), project, url=image_server.url("/image"))
    monkeypatch.setattr(
        image_import_work, "image_size_refusal", lambda project, size, **_: "Too big."
    )
    image_import = run_latest()
    assert (image_import.status, image_import.message) == (ImportStatus.FAILED, "Too big.")
    assert left_in(images_dir) == []


def test_viewers_and_outsiders_cannot_import_cancel_retry_or_dismiss(
    client_for, api_for, project, image_server
):
    image_server.serve("/ok", b"x")
    assert start(client_for("viewer"), project, url=image_server.url("/ok")).status_code == 403
    assert start(client_for("outsider"), project, url=image_server.url("/ok")).status_code == 404
    body = {"name": "noble", "format": "qcow2", "url": image_server.url("/ok")}
    assert api_for("viewer").post("/projects/alpha/image-imports", body).status_code == 403
    assert image_server.routes["/ok"].requests == 0
    image_import = ImageImport.objects.create(
        project=project, name="noble", format="qcow2", url=image_server.url("/ok")
    )
    for action in ("cancel", "retry", "dismiss"):
        url = reverse(f"image-url-import-{action}", args=[project.slug, image_import.pk])
        assert client_for("viewer").post(url).status_code == 403
        assert client_for("outsider").post(url).status_code == 404
        assert client_for("operator").get(url).status_code == 405  # no change on GET
    cancel = f"/projects/alpha/image-imports/{image_import.pk}/cancel"
    assert api_for("viewer").post(cancel).status_code == 403
    assert ImageImport.objects.get().status == ImportStatus.QUEUED
    assert (
        api_for("viewer").get(f"/projects/alpha/image-imports/{image_import.pk}").status_code == 200
    )


def test_the_api_starts_an_import_and_answers_bad_input_at_its_field(
    api_for, project, image_server, images_dir, tmp_path
):
    body = qcow2(tmp_path).read_bytes()
    image_server.serve("/noble.qcow2", body)
    api = api_for("operator")
    wrong = api.post("/projects/alpha/image-imports", {
        "name": "noble", "format": "qcow2", "url": image_server.url("/nothing"),
    })  # fmt: skip
    assert wrong.status_code == 422
    assert "answers 404" in errors_of(wrong)["url"][0]
    started = api.post("/projects/alpha/image-imports", {
        "name": "noble", "format": "qcow2", "url": image_server.url("/noble.qcow2"),
        "sha256": hashlib.sha256(body).hexdigest(),
    })  # fmt: skip
    assert started.status_code == 201, started.json()
    assert started.json()["status"] == "queued"
    run_latest()
    shown = api.get(f"/projects/alpha/image-imports/{started.json()['id']}").json()
    assert (shown["status"], shown["bytes_done"], shown["bytes_total"]) == (
        "done",
        len(body),
        len(body),
    )
    assert shown["image_id"] == Image.objects.get(name="noble").pk
    refused = api.post(f"/projects/alpha/image-imports/{shown['id']}/cancel")
    assert refused.status_code == 409


def test_an_import_whose_worker_stopped_is_marked_interrupted_and_can_be_retried(
    client_for, project, image_server, images_dir, tmp_path
):
    image_server.serve("/noble.qcow2", qcow2(tmp_path))
    start(client_for("operator"), project, url=image_server.url("/noble.qcow2"))
    image_import = ImageImport.objects.get()
    # as a worker killed during the download leaves it: claimed, a part file, no beats since
    part = image_import_work.part_file(image_import)
    part.write_bytes(b"half")
    ImageImport.objects.filter(pk=image_import.pk).update(
        status=ImportStatus.RUNNING, bytes_done=4,
        heartbeat_at=timezone.now() - timedelta(seconds=image_import_work.STALE_SECONDS + 1),
    )  # fmt: skip
    image_imports_sweep()
    image_import.refresh_from_db()
    assert image_import.status == ImportStatus.FAILED
    assert image_import.message.startswith("Interrupted: the worker stopped during the import")
    assert left_in(images_dir) == []
    image_import_run(image_import.pk, 1)  # the broker's copy of the message, delivered late
    assert ImageImport.objects.get().status == ImportStatus.FAILED
    retry = reverse("image-url-import-retry", args=[project.slug, image_import.pk])
    assert "Importing noble again." in client_for("operator").post(retry, follow=True).text
    assert run_latest().status == ImportStatus.DONE
    assert Image.objects.filter(name="noble").exists()


def test_an_operator_cancels_a_queued_import_then_dismisses_it(client_for, project, image_server):
    image_server.serve("/ok", b"x")
    start(client_for("operator"), project, url=image_server.url("/ok"))
    image_import = ImageImport.objects.get()
    dismiss = reverse("image-url-import-dismiss", args=[project.slug, image_import.pk])
    page = client_for("operator").post(dismiss, follow=True).text
    assert "The import of noble is still running: cancel it." in page
    cancel = reverse("image-url-import-cancel", args=[project.slug, image_import.pk])
    assert (
        "Cancelling the import of noble." in client_for("operator").post(cancel, follow=True).text
    )
    image_import.refresh_from_db()
    assert image_import.status == ImportStatus.CANCELLED
    image_import_run(image_import.pk, image_import.attempt)  # its message, arriving late
    assert ImageImport.objects.get().status == ImportStatus.CANCELLED
    assert image_server.routes["/ok"].requests == 1  # the probe only
    assert "Import of noble dismissed." in client_for("operator").post(dismiss, follow=True).text
    assert not ImageImport.objects.exists() and not Image.objects.exists()
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"image.import", "image.import.cancel", "image.import.dismiss"} <= actions


@pytest.mark.parametrize(
    ("limits", "serving", "message"),
    [
        ({"ZOPDAY_IMPORT_MIN_BYTES_PER_SECOND": 1000, "ZOPDAY_IMPORT_RATE_WINDOW_SECONDS": 1},
         {"rate": 20}, "over the last 1 s, below the minimum of 1000 bytes/s an import must keep up"),
        ({"ZOPDAY_IMPORT_DEADLINE_SECONDS": 1, "ZOPDAY_IMPORT_MIN_BYTES_PER_SECOND": 0},
         {"rate": 8 * 1024}, "The import took longer than 1 s, the longest an import may take"),
    ],
)  # fmt: skip
def test_a_server_that_drips_its_file_fails_the_import_saying_which_limit_it_broke(
    client_for, project, image_server, images_dir, settings, limits, serving, message
):
    for name, value in limits.items():
        setattr(settings, name, value)
    route = image_server.serve("/drip.img", b"\0" * (64 * 1024), **serving)
    start(client_for("operator"), project, format="raw", url=image_server.url("/drip.img"))
    image_import = run_latest()
    assert (image_import.status, image_import.error_field) == (ImportStatus.FAILED, "url")
    assert message in image_import.message, image_import.message
    assert route.sent < 64 * 1024  # given up, not waited out
    assert not Image.objects.exists() and left_in(images_dir) == []
    page = client_for("viewer").get(reverse("image-list", args=[project.slug])).text
    shown = page.split(f'id="import-{image_import.pk}-url-error">', 1)[1].split("</p>", 1)[0]
    assert message in html.unescape(shown)


def test_a_projects_imports_past_its_cap_wait_their_turn_in_order(
    client_for, api_for, project, image_server, images_dir, tmp_path, settings
):
    settings.ZOPDAY_IMPORTS_PER_PROJECT = 1
    image_server.serve("/noble.qcow2", qcow2(tmp_path))
    for name in ("first", "second", "third"):
        start(client_for("operator"), project, name=name, url=image_server.url("/noble.qcow2"))
    first, second, third = ImageImport.objects.order_by("pk")
    assert [item.waiting for item in (first, second, third)] == [False, True, True]
    page = client_for("viewer").get(reverse("image-list", args=[project.slug])).text
    assert f'id="import-{first.pk}-waiting"' not in page
    assert f'id="import-{second.pk}-waiting">Waiting: 1 of the project' in page
    shown = api_for("viewer").get(f"/projects/alpha/image-imports/{third.pk}").json()
    assert (shown["status"], shown["waiting"]) == ("queued", True)
    image_import_run(second.pk, second.attempt)  # a message it was never sent: nothing happens
    assert ImageImport.objects.get(pk=second.pk).status == ImportStatus.QUEUED

    image_import_run(first.pk, first.attempt)  # it lands, and frees its slot for the next
    second.refresh_from_db(), third.refresh_from_db()
    assert (second.waiting, third.waiting) == (False, True)
    cancel = reverse("image-url-import-cancel", args=[project.slug, second.pk])
    client_for("operator").post(cancel)  # cancelled before it started: the third goes
    third.refresh_from_db()
    assert not third.waiting
    image_import_run(third.pk, third.attempt)
    statuses = dict(ImageImport.objects.values_list("name", "status"))
    assert statuses == {"first": "done", "second": "cancelled", "third": "done"}


def run_apart(image_import: ImageImport) -> None:
    """The worker's service on a thread of its own, as the import worker's threads run it."""
    try:
        image_import_run(image_import.pk, image_import.attempt)
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("announced", [True, False], ids=["size-announced", "size-unknown"])
def test_imports_running_together_never_take_the_project_past_its_image_quota(
    client_for, project, image_server, images_dir, settings, monkeypatch, announced
):
    settings.ZOPDAY_PROJECT_IMAGE_QUOTA_GB = 1 / 1024  # 1 MiB
    settings.ZOPDAY_IMPORT_STALL_SECONDS = 60  # the server holds each download a while
    settings.ZOPDAY_IMPORTS_PER_PROJECT = 3
    monkeypatch.setattr(import_slots, "send_on_commit", lambda *args, **kwargs: None)  # run here
    size, hold = 600 * 1024, 300 * 1024  # each fits alone, any two do not
    routes = [
        image_server.serve(f"/disk-{n}.img", b"\0" * size, hold_after=hold, announced=announced)
        for n in range(3)
    ]
    for n in range(3):
        start(client_for("operator"), project, name=f"disk-{n}", format="raw",
              url=image_server.url(f"/disk-{n}.img"))  # fmt: skip
    imports = ImageImport.objects.order_by("pk")
    threads = [threading.Thread(target=run_apart, args=(item,)) for item in imports]
    for thread in threads:
        thread.start()

    def each_held_or_refused() -> bool:
        return all(
            item.status == ImportStatus.FAILED or item.bytes_reserved >= hold
            for item in imports.all()  # read anew
        )

    deadline = time.monotonic() + 60
    while not each_held_or_refused():
        assert time.monotonic() < deadline, list(imports.values("status", "bytes_reserved"))
        time.sleep(0.1)
    held = sum(imports.filter(status=ImportStatus.RUNNING).values_list("bytes_reserved", flat=True))
    assert held <= GIB / 1024, held
    for route in routes:
        route.release.set()
    for thread in threads:
        thread.join(60)
    outcomes = sorted(imports.values_list("status", "message"))
    assert [status for status, _ in outcomes] == ["done", "failed", "failed"], outcomes
    assert all("past their quota of 1.0 MiB" in message for _, message in outcomes[1:])
    stored = sum(path.stat().st_size for path in (images_dir / "uploads" / "alpha").iterdir())
    assert stored <= GIB / 1024 and len(left_in(images_dir)) == 1


def running_import(project, name: str, reserved: int) -> ImageImport:
    return ImageImport.objects.create(
        project=project, name=name, format="raw", url=f"http://{name}.invalid/disk.img",
        status=ImportStatus.RUNNING, bytes_reserved=reserved,
    )  # fmt: skip


def test_a_refused_read_ahead_never_lets_go_of_what_the_import_held(project, settings, monkeypatch):
    settings.ZOPDAY_PROJECT_IMAGE_QUOTA_GB = 1 / 1024  # 1 MiB
    kib = 1024
    mine, rival = running_import(project, "mine", 600 * kib), running_import(project, "rival", 0)
    seen: list[int] = []
    refusal = image_quota.quota_refusal

    def watched(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(ImageImport.objects.get(pk=mine.pk).bytes_reserved)
        return refusal(*args, **kwargs)

    monkeypatch.setattr(image_quota, "quota_refusal", watched)
    # the read-ahead does not fit, the bytes that arrived do
    assert image_import_work._hold(mine, 700 * kib, ahead=400 * kib) == 700 * kib
    assert seen == [600 * kib, 600 * kib]  # never 0 between the two tries

    with pytest.raises(image_import_work.url_fetch.FetchError, match="past their quota"):
        image_import_work._hold(mine, 1100 * kib, ahead=64 * kib)
    mine.refresh_from_db()
    assert mine.bytes_reserved == 700 * kib
    held, message = image_quota.image_import_hold(image_import=rival, size=400 * kib)
    assert (held, "past their quota" in message) == (0, True)
