"""Pages for requests Django refuses before a view runs."""

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.defaults import bad_request as django_bad_request
from django.views.defaults import page_not_found as django_page_not_found
from django.views.defaults import permission_denied as django_permission_denied


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A form or body over DATA_UPLOAD_MAX_MEMORY_SIZE says so (413) in the API's error body
    under /api/, on a page elsewhere; any other 400 is Django's own."""
    if not isinstance(exception, RequestDataTooBig):
        return django_bad_request(request, exception)
    cap = f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE / 1_000_000:g} MB"
    if request.path.startswith("/api/"):
        message = f"The body is larger than the {cap} the API accepts: send less."
        return JsonResponse({"detail": message, "errors": {"body": [message]}}, status=413)
    return render(request, "413.html", {"cap": cap}, status=413)


# Django's own 403 and 404 pages, less their CSRF check, which reads a form body for its token:
# a refused upload would be read to disk after all.
def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    return django_permission_denied.__wrapped__(request, exception)  # type: ignore[attr-defined,no-any-return]


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    return django_page_not_found.__wrapped__(request, exception)  # type: ignore[attr-defined,no-any-return]
