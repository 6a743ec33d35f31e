"""Slow polling of settled parts of a page, so a change made elsewhere (another user, the run
strategy's reconciler, a guest powering itself off) shows without a reload.

A settled part polls every 5 s with `seen=<digest of what it shows>`; while the digest
holds the answer is 204 No Content, on which htmx swaps nothing (an open menu stays open). A part
in a transitional state polls every second on its own and needs none of this.
"""

import hashlib

from django.http import HttpRequest, HttpResponse


def digest(*shown: object) -> str:
    """A short digest of the values a part renders (their repr: dataclasses and plain values)."""
    return hashlib.blake2b(repr(shown).encode(), digest_size=8).hexdigest()


def poll_url(request: HttpRequest, version: str) -> str:
    """This request's own URL (its filters and page kept) asking whether `version` still holds."""
    query = request.GET.copy()
    query["seen"] = version
    return f"{request.path}?{query.urlencode()}"


def still_shown(request: HttpRequest, version: str) -> HttpResponse | None:
    """204 No Content when the poll's `seen` is the current version; None when it changed."""
    if request.GET.get("seen") == version:
        return HttpResponse(status=204)
    return None
