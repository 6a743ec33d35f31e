"""Fetching a file over HTTP(S) for an image import, with requests: a connect timeout, a stall
timeout (no bytes for that long) and a redirect limit. Every failure is a FetchError whose
message says what to fix; only http and https are ever requested, and never an address the
egress policy blocks (instances.egress): each hop's host is resolved and checked, the
connection pinned to that address, and the peer checked again once connected."""

import contextlib
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import requests
import urllib3
from django.conf import settings

from instances import egress
from instances.egress.http import pinned_session

SCHEMES = ("http", "https")
CHUNK = 256 * 1024
CONNECT_SECONDS = 10
MAX_REDIRECTS = 5


class FetchError(Exception):
    """A download that cannot go on; `field` is the form field the message belongs at."""

    def __init__(self, message: str, field: str = "url") -> None:
        super().__init__(message)
        self.message, self.field = message, field


@dataclass(frozen=True)
class Limits:
    connect: float
    stall: float
    redirects: int


def limits() -> Limits:
    return Limits(
        connect=CONNECT_SECONDS,
        stall=settings.ZOPDAY_IMPORT_STALL_SECONDS,
        redirects=MAX_REDIRECTS,
    )


def url_refusal(url: str) -> str:
    """Why the console will not fetch `url` ("" when it will)."""
    if not url:
        return "Give the address of the image file (http:// or https://)."
    if len(url) > 2000:
        return "Use an address of at most 2000 characters."
    try:
        parts = egress.split_url(url)
    except ValueError as error:
        return str(error)
    if parts.scheme not in SCHEMES:
        scheme = f"{parts.scheme}:" if parts.scheme else "an address without a scheme"
        return f"Only http:// and https:// addresses are fetched, not {scheme}: give one."
    if not parts.host:
        return "The address names no host: give one such as https://example.com/image.qcow2."
    return ""


def _get(session: requests.Session, url: str, within: Limits) -> requests.Response:
    """GET one hop: the session checks its host's addresses and its peer at connect time."""
    if message := url_refusal(url):  # a redirect's Location is checked as the address was
        raise FetchError(message)
    try:
        parts = egress.split_url(url)
        egress.checked_addresses(parts.host, parts.port)  # said before any connection
        response = session.get(
            url, stream=True, timeout=(within.connect, within.stall), allow_redirects=False,
            headers={"Accept-Encoding": "identity"},
        )  # fmt: skip
    except egress.EgressRefused as refused:
        raise FetchError(refused.message) from None
    except requests.RequestException as error:
        raise FetchError(_reason(error, url, within)) from None
    return response


def _followed(session: requests.Session, url: str, within: Limits) -> requests.Response:
    """The response after at most within.redirects redirects, each hop checked."""
    for _ in range(within.redirects + 1):
        response = _get(session, url, within)
        if not response.is_redirect:
            return response
        response.close()
        try:
            location = urljoin(url, response.headers.get("Location", ""))
            scheme = urlsplit(location).scheme.lower()
        except ValueError:
            raise FetchError(
                "The address redirects to one that is not valid: give another."
            ) from None
        if scheme not in SCHEMES:
            raise FetchError(
                "The address redirects to one that is not http:// or https://: give another."
            )
        url = location
    raise FetchError(
        f"The address redirects more than {within.redirects} times (a redirect loop?): "
        "give the file's own address."
    )


@contextmanager
def url_opened(url: str, within: Limits) -> Iterator[requests.Response]:
    """The response of GET `url` after redirects, its body not read yet; FetchError unless
    it answers 200 OK."""
    if message := url_refusal(url):
        raise FetchError(message)
    session = pinned_session()
    try:
        response = _followed(session, url, within)
    except FetchError:
        session.close()
        raise
    try:
        if response.status_code != 200:
            raise FetchError(
                f"The address answers {response.status_code} {response.reason or ''}".rstrip()
                + ", not the file: check the address."
            )
        yield response
    finally:
        response.close()
        session.close()


def content_length(response: requests.Response) -> int | None:
    value = response.headers.get("Content-Length", "")
    return int(value) if value.isdigit() else None


def chunks(response: requests.Response, within: Limits) -> Iterator[bytes]:
    """The body as it arrives, each piece as soon as it comes (so a caller sees a slow server's
    pace); FetchError when it stalls or breaks off."""
    while True:
        try:
            chunk = response.raw.read1(CHUNK)
        except urllib3.exceptions.HTTPError as error:
            raise FetchError(_reason(_as_requests(error), response.url, within)) from None
        if not chunk:
            return
        yield chunk


def _as_requests(error: urllib3.exceptions.HTTPError) -> requests.RequestException:
    """urllib3's error as requests' iter_content would have raised it."""
    if isinstance(error, urllib3.exceptions.SSLError):
        return requests.exceptions.SSLError(error)
    if isinstance(error, urllib3.exceptions.ProtocolError):
        return requests.exceptions.ChunkedEncodingError(error)
    return requests.exceptions.ConnectionError(error)


def cut(response: requests.Response) -> None:
    """End a download from another thread: its socket is shut, so a read waiting on it
    returns at once (and the reading thread fails with FetchError)."""
    connection = getattr(response.raw, "connection", None)
    sock = getattr(connection, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _reason(error: requests.RequestException, url: str, within: Limits) -> str:
    host = urlsplit(url).hostname or url
    text = repr(error)
    if isinstance(error, requests.TooManyRedirects):
        return (
            f"The address redirects more than {within.redirects} times (a redirect loop?): "
            "give the file's own address."
        )
    if isinstance(error, requests.exceptions.InvalidSchema):
        return "The address redirects to one that is not http:// or https://: give another."
    if isinstance(error, (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema)):
        return "This is not a valid address: check it."
    if isinstance(error, requests.ConnectTimeout):
        return f"{host} did not answer within {within.connect:.0f} s: check the address."
    if "NameResolutionError" in text or "Name or service not known" in text:
        return f"The host {host} is unknown: check the address's host name."
    if isinstance(error, (requests.ReadTimeout, requests.exceptions.ConnectionError)) and (
        "timed out" in text.lower()
    ):
        return (
            f"{host} stopped sending for {within.stall:.0f} s: try again later, or another mirror."
        )
    if isinstance(error, requests.exceptions.ChunkedEncodingError):
        return (
            f"{host} broke the download off before the end (less than it announced came): "
            "try again, or another mirror."
        )
    if isinstance(error, requests.exceptions.SSLError):
        return f"{host}'s TLS certificate is not trusted here: check the address."
    if isinstance(error, requests.exceptions.ConnectionError):
        return f"Could not connect to {host}: check the address and that the server is up."
    return f"The download failed ({type(error).__name__}): try again."
