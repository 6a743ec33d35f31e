"""An image's file served to a cluster's importer (CDI) through a signed link: GET and HEAD,
with byte ranges, since importers probe the size and may fetch in parts. No login: the link is
the credential, and it opens this one file until it expires."""

import re
from collections.abc import Iterator
from pathlib import Path

from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.views.decorators.http import require_http_methods

from instances.image_links import LINKED_KINDS, link_opens
from instances.models import Image

CHUNK = 1024 * 1024
RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def _byte_range(header: str, size: int) -> tuple[int, int] | None:
    """The first and last byte a single `Range` asks for; None to send the whole file (no
    range, or one this view does not serve: several at once). Unsatisfiable is (size, size)."""
    match = RANGE.fullmatch(header.strip())
    if match is None or not (match[1] or match[2]):
        return None
    if not match[1]:  # the last N bytes
        return max(size - int(match[2]), 0), size - 1
    first = int(match[1])
    last = min(int(match[2]), size - 1) if match[2] else size - 1
    if first >= size or last < first:
        return size, size
    return first, last


def _read(path: Path, first: int, length: int) -> Iterator[bytes]:
    with path.open("rb") as file:
        file.seek(first)
        while length > 0 and (data := file.read(min(CHUNK, length))):
            length -= len(data)
            yield data


@require_http_methods(["GET", "HEAD"])
def image_import(
    request: HttpRequest, pk: int, file_name: str
) -> HttpResponse | StreamingHttpResponse:
    if not link_opens(request.GET.get("link", ""), pk, file_name):
        return HttpResponse(
            "This image link is not valid or has expired.\n", status=403, content_type="text/plain"
        )
    image = Image.objects.filter(pk=pk, kind__in=LINKED_KINDS).first()
    if image is None or image.file.name != file_name or not image.file.is_file():
        raise Http404("No such image.")
    path = image.file
    size = path.stat().st_size
    wanted = _byte_range(request.headers.get("Range", ""), size)
    first, last, status = 0, size - 1, 200
    if wanted == (size, size):
        unsatisfiable = HttpResponse(status=416)
        unsatisfiable["Content-Range"] = f"bytes */{size}"
        return unsatisfiable
    if wanted is not None:
        (first, last), status = wanted, 206
    length = last - first + 1
    if request.method == "HEAD":
        response: HttpResponse | StreamingHttpResponse = HttpResponse(status=status)
    else:
        response = StreamingHttpResponse(_read(path, first, length), status=status)
    response["Content-Type"] = "application/octet-stream"
    response["Content-Length"] = str(length)
    response["Accept-Ranges"] = "bytes"
    response["Cache-Control"] = "no-store"
    if status == 206:
        response["Content-Range"] = f"bytes {first}-{last}/{size}"
    return response
