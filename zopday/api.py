"""The JSON API's wiring: one NinjaAPI with its auth, error handlers and routers."""

from typing import Any

from django.http import HttpRequest, HttpResponse

from instances.api import (
    container_images,
    disks,
    image_imports,
    images,
    instances,
    keys,
    network,
    nics,
    projects,
)
from instances.api.auth import API_AUTH
from instances.api.conditions import conditional
from instances.api.errors import install_error_handlers, json_not_allowed, respond
from instances.api.mistakes import every_mistake
from instances.api.openapi import DocumentedAPI
from instances.api.parameters import unknown_refused
from instances.manifests import endpoints as manifest_endpoints
from provisioning import api as provisioning_api

api = DocumentedAPI(
    title="ZopDay console API",
    version="1",
    description=(
        "Create and operate instances. Authenticate with a browser session (plus CSRF token "
        "on unsafe methods) or a personal token: `Authorization: Bearer zop_...`, made with "
        "`manage.py api_token create USERNAME NAME`.\n\n"
        'Every refusal has one body, `{"detail": ..., "errors": {field: [messages]}}`, '
        "with every mistake of the request at once: 400 for a query parameter the endpoint "
        "does not take, 405 (with `Allow`) for a method the path does not take, 412 for a "
        "stale `If-Match`, 422 for fields. An object answered singly carries an `ETag`; send it "
        "back in `If-Match` to change or delete the object only if nobody did meanwhile."
    ),
    urls_namespace="api-v1",
    auth=API_AUTH,
)
install_error_handlers(api)
api.add_decorator(every_mistake, mode="view")  # a body off the schema: its meaning errors too
api.add_decorator(conditional, mode="view")  # If-Match, ETag, If-None-Match
api.add_decorator(unknown_refused, mode="view")  # checked first: unknown query parameters
for module in (
    projects,
    images,
    container_images,
    image_imports,
    network,
    keys,
    instances,
    nics,
    disks,
):
    api.add_router("", module.router)
api.add_router("", manifest_endpoints.router)
api.add_router("", provisioning_api.router)


def api_urls() -> tuple[list[Any], str, str]:
    """The API's URL patterns, a 405 answered in the one error body."""
    patterns, app_name, namespace = api.urls
    return json_not_allowed(api, patterns), app_name, namespace


def unknown_path(request: HttpRequest) -> HttpResponse:
    """Any path under /api/v1/ that no endpoint answers: a JSON 404 like the endpoints' own."""
    detail = f"No API endpoint at {request.path}: the endpoints are listed at /api/v1/docs."
    return respond(api, request, 404, detail)
