"""Signed image links, through which a cluster's importer fetches an image's file: GET and
HEAD with byte ranges for a valid link, 403 for a forged, altered or expired one, 404 for an
image that is gone; no login, the link is the credential."""

import time
from urllib.parse import parse_qs, urlsplit

import pytest

from instances import image_links
from instances.backends.base import BackendError, DiskSpec
from instances.choices import ImageKind
from instances.image_links import disk_image_url, image_link
from instances.models import Image

pytestmark = pytest.mark.django_db
CONTENT = bytes(range(256)) * 40  # 10240 bytes


@pytest.fixture
def image(tmp_path, settings):
    settings.ZOPDAY_PUBLIC_URL = "http://console.example:8000"
    path = tmp_path / "cloud.qcow2"
    path.write_bytes(CONTENT)
    return Image.objects.create(name="cloud", kind=ImageKind.QCOW2, path=str(path))


def local(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def test_a_link_serves_the_image_whole_to_anyone_holding_it(client, image):
    url = image_link(image)
    assert url.startswith("http://console.example:8000/images/")
    assert urlsplit(url).path == f"/images/{image.pk}/import/cloud.qcow2"
    response = client.get(local(url))
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == CONTENT
    assert (response["Content-Length"], response["Accept-Ranges"]) == ("10240", "bytes")


def test_head_gives_the_size_and_ranges_give_their_bytes(client, image):
    url = local(image_link(image))
    head = client.head(url)
    assert (head.status_code, head["Content-Length"], head.content) == (200, "10240", b"")
    part = client.get(url, HTTP_RANGE="bytes=100-299")
    assert (part.status_code, part["Content-Range"]) == (206, "bytes 100-299/10240")
    assert b"".join(part.streaming_content) == CONTENT[100:300]
    tail = client.get(url, HTTP_RANGE="bytes=-16")
    assert b"".join(tail.streaming_content) == CONTENT[-16:]
    rest = client.get(url, HTTP_RANGE="bytes=10000-")
    assert rest["Content-Range"] == "bytes 10000-10239/10240"
    beyond = client.get(url, HTTP_RANGE="bytes=20000-")
    assert (beyond.status_code, beyond["Content-Range"]) == (416, "bytes */10240")


def test_a_forged_or_altered_link_is_refused(client, image):
    url = local(image_link(image))
    link = parse_qs(urlsplit(url).query)["link"][0]
    forged = url.replace(link[-5:], "AAAAA" if link[-5:] != "AAAAA" else "BBBBB")
    assert client.get(forged).status_code == 403
    assert client.get(url.split("?")[0]).status_code == 403  # no link at all
    other = Image.objects.create(name="other", kind=ImageKind.QCOW2, path=image.path)
    moved = url.replace(f"/images/{image.pk}/", f"/images/{other.pk}/")
    assert client.get(moved).status_code == 403  # a link opens its own image only


def test_an_expired_link_is_refused(client, image, monkeypatch):
    url = local(image_link(image))
    monkeypatch.setattr(image_links, "LINK_SECONDS", 1)
    time.sleep(2.1)
    response = client.get(url)
    assert response.status_code == 403
    assert b"expired" in response.content


def test_a_link_to_an_image_since_deleted_or_without_its_file_is_404(client, image, tmp_path):
    url = local(image_link(image))
    (tmp_path / "cloud.qcow2").unlink()
    assert client.get(url).status_code == 404
    image.delete()
    assert client.get(url).status_code == 404


def test_the_backend_gets_a_link_per_disk_image_and_a_clear_error_without_a_public_url(
    image, settings
):
    disk = DiskSpec(name="disk-1", role="root", bus="virtio", size_gb=1, source=image.file)
    assert urlsplit(disk_image_url(disk)).path == f"/images/{image.pk}/import/cloud.qcow2"
    blank = DiskSpec(name="disk-2", role="secondary", bus="virtio", size_gb=1)
    assert disk_image_url(blank) == ""
    settings.ZOPDAY_PUBLIC_URL = ""
    with pytest.raises(BackendError, match="set ZOPDAY_PUBLIC_URL"):
        disk_image_url(disk)
