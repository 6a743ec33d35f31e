"""ETags and preconditions, so that concurrent writers cannot overwrite what they never saw.

An object answered singly carries a strong ETag, a hash of its JSON as GET answers it. `If-Match`
on PUT, PATCH, DELETE (or a POST action under an object) is compared with the ETag GET would
answer now: a stale value gets 412 and nothing changes. `If-None-Match` on a GET answers 304.
"""

import copy
import hashlib
import inspect
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseNotModified
from django.urls import Resolver404, resolve
from django.utils.cache import patch_vary_headers
from ninja import Schema
from ninja.operation import Operation

from instances.api.errors import ErrorOut, respond
from instances.api.schemas import ElasticIPReleaseOut, InstancePage

API_NAMESPACE = "api-v1"
WRITES = ("POST", "PUT", "PATCH", "DELETE")
CONDITIONAL_HEADERS = ("HTTP_IF_MATCH", "HTTP_IF_NONE_MATCH")
# Bodies that are a schema but not an object the API can be asked for again.
NOT_OBJECTS: set[type[Schema]] = {ErrorOut, InstancePage, ElasticIPReleaseOut}

Run = Callable[..., HttpResponseBase]


def etag_of(content: bytes) -> str:
    return '"' + hashlib.sha256(content).hexdigest()[:32] + '"'


def _tags(header: str) -> list[str]:
    """The entity tags of an If-Match or If-None-Match header (ours never hold a comma)."""
    return [tag.strip() for tag in header.split(",") if tag.strip()]


def _object_statuses(operation: Operation) -> set[int]:
    """The statuses at which this operation answers one object (not a list, a page or an error)."""
    statuses = set()
    for status, model in operation.response_models.items():
        body = model.model_fields["response"].annotation if model else None
        if isinstance(body, type) and issubclass(body, Schema) and body not in NOT_OBJECTS:
            statuses.add(status)
    return statuses


def conditional(run: Run) -> Run:
    """ninja's view decorator for every operation: If-Match checked before it runs, an ETag on
    the object it answers, 304 for a GET whose If-None-Match still holds."""
    operation: Operation = inspect.unwrap(run).__self__  # type: ignore[attr-defined]
    objects = _object_statuses(operation)

    @wraps(run)
    def view(request: HttpRequest, **kwargs: Any) -> HttpResponseBase:
        if request.method in WRITES and "If-Match" in request.headers:
            with transaction.atomic():  # the check and the write, one writer of a target at once
                _hold(_target(request))
                refused = _precondition_failed(operation, request)
                response = refused if refused is not None else run(request, **kwargs)
        else:
            response = run(request, **kwargs)
        if response.status_code not in objects or not isinstance(response, HttpResponse):
            return response
        tag = etag_of(response.content)
        response["ETag"] = tag
        patch_vary_headers(response, ["Authorization", "Cookie"])
        wanted = request.headers.get("If-None-Match")
        if request.method == "GET" and wanted is not None:
            weak = [candidate.removeprefix("W/") for candidate in _tags(wanted)]
            if "*" in weak or tag in weak:
                not_modified = HttpResponseNotModified()
                not_modified["ETag"] = tag
                return not_modified
        return response

    return view


def _target(request: HttpRequest) -> str:
    """The path of the object a write acts on: a POST, the one its path is under
    (/disks/5/resize: disk 5)."""
    return request.path_info if request.method != "POST" else request.path_info.rsplit("/", 1)[0]


def _hold(target: str) -> None:
    """Until the transaction ends, no other conditional write of `target` checks its If-Match:
    two writers holding one ETag cannot both pass. A PostgreSQL advisory lock; SQLite (one
    host's embedded database) takes none."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"if-match:{target}"])


def _precondition_failed(operation: Operation, request: HttpRequest) -> HttpResponseBase | None:
    """None when If-Match holds; else the answer: 412, or GET's own refusal (401, 403, 404)."""
    current = _current(request, _target(request))
    if current is not None and current.status_code in (401, 403, 404, 429):
        return current
    tag = current.get("ETag") if current is not None and current.status_code == 200 else None
    wanted = _tags(request.headers["If-Match"])
    if tag is not None and ("*" in wanted or tag in wanted):
        return None
    if tag is None:
        detail = "There is no object here to compare If-Match with: send the request without it."
    else:
        detail = (
            f"If-Match does not hold: the object's ETag is now {tag}, it changed since you read "
            "it. GET it again, check that your change still applies, and send that ETag."
        )
    response = respond(operation.api, request, 412, detail, {"If-Match": [detail]})
    if tag is not None:
        response["ETag"] = tag
    return response


def _current(request: HttpRequest, path_info: str) -> HttpResponseBase | None:
    """What GET of this API path answers now to the same caller, or None when no endpoint is
    there. The request is copied without its body, query and conditional headers."""
    try:
        match = resolve(path_info)
    except Resolver404:
        return None
    if match.namespace != API_NAMESPACE:
        return None
    probe = copy.copy(request)
    probe.__dict__.pop("headers", None)  # HttpRequest.headers is cached from META
    probe.method = "GET"
    probe.META = {
        **{name: value for name, value in request.META.items() if name not in CONDITIONAL_HEADERS},
        "REQUEST_METHOD": "GET",
        "QUERY_STRING": "",
    }
    probe.GET = probe.GET.__class__()
    probe.path = request.path[: len(request.path) - len(request.path_info)] + path_info
    probe.path_info = path_info
    probe.resolver_match = match
    return match.func(probe, *match.args, **match.kwargs)
