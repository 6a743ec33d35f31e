"""One error body for every refusal: `{"detail": "...", "errors": {"field": ["message"]}}`.

422: a service's ValidationError (message_dict keys, e.g. nics-0-mac), a request off the schema,
a body not JSON or nested too deep (`{"body": [...]}`). 401: no or a bad token or session. 403:
PermissionDenied (role, CSRF). 404: Http404 (missing or another project's). 409: ActionRefused.
413: a body over DATA_UPLOAD_MAX_MEMORY_SIZE. 500: anything else (traceback with ZOPDAY_DEBUG).
400: a query parameter the endpoint does not know (parameters.py). 405: a method the path does not
take, with Allow. 412: a stale If-Match (conditions.py).
"""

import json
import logging
import traceback
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.core.exceptions import NON_FIELD_ERRORS, PermissionDenied, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, HttpResponseNotAllowed
from django.urls import URLPattern
from ninja import NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as SchemaValidationError

from instances.disk_full import DISK_FULL_MESSAGE, is_disk_full
from instances.errors import ActionRefused

logger = logging.getLogger(__name__)
UNAUTHORIZED = "Log in, or send an API token as `Authorization: Bearer zop_...`."


class ErrorOut(Schema):
    detail: str
    errors: dict[str, list[str]] = {}


# The statuses every endpoint may answer with, for the OpenAPI document.
ERRORS: dict[int, type[Schema]] = {
    400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 422: ErrorOut,
}  # fmt: skip
REFUSALS: dict[int, type[Schema]] = {**ERRORS, 409: ErrorOut}


def respond(
    api: NinjaAPI,
    request: HttpRequest,
    status: int,
    detail: str,
    errors: dict[str, list[str]] | None = None,
) -> HttpResponse:
    """The one error body, for the handlers below and for paths no endpoint answers."""
    return api.create_response(request, {"detail": detail, "errors": errors or {}}, status=status)


def summary(errors: dict[str, list[str]]) -> str:
    return "; ".join(
        message if field == NON_FIELD_ERRORS else f"{field}: {message}"
        for field, messages in errors.items()
        for message in messages
    )


def _field_path(loc: list | tuple) -> str:
    """("body", "payload", "nics", 0, "mac") → "nics-0-mac", the services' key for that field."""
    source, *rest = loc or ["body"]
    if source == "body" and rest:
        rest = rest[1:]  # the name of the endpoint's body parameter
    return "-".join(str(part) for part in rest) or str(source)


def schema_errors(exc: SchemaValidationError) -> dict[str, list[str]]:
    """A request off the schema, as messages by field path."""
    errors: dict[str, list[str]] = {}
    for error in exc.errors:
        message = str(error["msg"])
        if error.get("type") == "extra_forbidden":
            message = "This field is unknown here: check its name in the API docs."
        elif error.get("type") == "model_attributes_type":
            message = "Send a JSON object of the fields."
        errors.setdefault(_field_path(error.get("loc", ())), []).append(message)
    return errors


def install_error_handlers(api: NinjaAPI) -> None:
    @api.exception_handler(DjangoValidationError)
    def validation_error(request: HttpRequest, exc: DjangoValidationError) -> HttpResponse:
        errors = (
            exc.message_dict if hasattr(exc, "error_dict") else {NON_FIELD_ERRORS: exc.messages}
        )
        return respond(api, request, 422, summary(errors), errors)

    @api.exception_handler(SchemaValidationError)
    def schema_error(request: HttpRequest, exc: SchemaValidationError) -> HttpResponse:
        errors = schema_errors(exc)
        return respond(api, request, 422, summary(errors), errors)

    @api.exception_handler(HttpError)
    def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
        if isinstance(exc.__cause__, RecursionError):  # JSON nested past Python's stack
            return too_deep(request, exc.__cause__)
        if isinstance(exc.__cause__, ValueError):  # ninja's "Cannot parse request body"
            message = (
                f"The body is not valid JSON: {exc.__cause__}"
                if isinstance(exc.__cause__, json.JSONDecodeError)
                else "The body is not valid UTF-8 JSON."
            )
            return respond(api, request, 422, message, {"body": [message]})
        if not isinstance(exc, AuthenticationError):
            return respond(api, request, exc.status_code, str(exc))
        # ninja's own message when no auth matched is a bare "Unauthorized".
        detail = UNAUTHORIZED if str(exc) == AuthenticationError().message else str(exc)
        response = respond(api, request, 401, detail)
        response["WWW-Authenticate"] = 'Bearer realm="zopday"'
        return response

    @api.exception_handler(ActionRefused)
    def action_refused(request: HttpRequest, exc: ActionRefused) -> HttpResponse:
        return respond(api, request, 409, exc.message)

    @api.exception_handler(PermissionDenied)
    def permission_denied(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
        return respond(api, request, 403, str(exc) or "You may not do this.")

    @api.exception_handler(Http404)
    def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
        return respond(api, request, 404, str(exc) or "Not found.")

    @api.exception_handler(RequestDataTooBig)
    def too_large(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
        cap = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        message = (
            f"The body is larger than the {cap / 1_000_000:g} MB the API accepts: send less "
            "(user data is at most 256 KiB; images go as multipart uploads)."
        )
        return respond(api, request, 413, message, {"body": [message]})

    @api.exception_handler(RecursionError)
    def too_deep(request: HttpRequest, exc: RecursionError) -> HttpResponse:
        message = "The body nests too deep to read: a few levels of objects and lists are enough."
        return respond(api, request, 422, message, {"body": [message]})

    @api.exception_handler(Exception)
    def server_error(request: HttpRequest, exc: Exception) -> HttpResponse:
        """A fault of the console: logged with its traceback, which the client is shown only
        when debugging was turned on (ZOPDAY_DEBUG)."""
        if is_disk_full(exc):
            logger.warning("%s %s refused: the disk is full", request.method, request.path)
            return respond(api, request, 503, DISK_FULL_MESSAGE)
        logger.error("API error on %s %s", request.method, request.path, exc_info=exc)
        detail = "The console failed to answer this request; the fault is logged on the server."
        if settings.DEBUG:
            detail += "\n" + "".join(traceback.format_exception(exc))
        return respond(api, request, 500, detail)


def json_not_allowed(api: NinjaAPI, patterns: list[Any]) -> list[Any]:
    """The API's URL patterns, answering a method a path does not take (405) in the one error
    body, with the Allow header ninja sets."""
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            pattern.callback = _not_allowed_in_json(api, pattern.callback)
    return patterns


def _not_allowed_in_json(api: NinjaAPI, view: Callable[..., HttpResponseBase]) -> Callable:
    @wraps(view)
    def answer(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = view(request, *args, **kwargs)
        if not isinstance(response, HttpResponseNotAllowed):
            return response
        allowed = ", ".join(sorted(method.strip() for method in response["Allow"].split(",")))
        detail = f"{request.method} is not allowed on {request.path}: use {allowed}."
        refused = respond(api, request, 405, detail)
        refused["Allow"] = allowed
        return refused

    return answer
