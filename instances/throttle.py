"""Throttled logins and API tokens, counted by django-axes per user name and address: past the
limit the login page and the API answer 429 with Retry-After and say when to try again."""

import math
from datetime import datetime, timedelta
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.handlers.database import AxesDatabaseHandler
from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_client_username, get_cool_off
from axes.models import AccessAttempt
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_login_failed
from django.db.models import Max
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone

from instances.disk_full import unless_disk_full

# What token failures are counted under: no user can have this name (spaces and brackets are not
# allowed in one), so a stream of bad tokens never locks a real user out, only the address.
TOKEN_USERNAME = "(api token)"
TOKEN_CREDENTIALS = {"username": TOKEN_USERNAME}


class LoginRecords(AxesDatabaseHandler):
    """axes' records of logins and logouts, left out while the disk is full (failures are still
    counted, or the login is refused with the disk-full page)."""

    def user_logged_in(self, sender, request, user, **kwargs):  # type: ignore[no-untyped-def]
        with unless_disk_full("the login record"):
            super().user_logged_in(sender, request, user, **kwargs)

    def user_logged_out(self, sender, request, user, **kwargs):  # type: ignore[no-untyped-def]
        with unless_disk_full("the logout record"):
            super().user_logged_out(sender, request, user, **kwargs)


class LoginThrottle(AxesStandaloneBackend):
    """axes' lockout check, where there is a request to count (not a management command)."""

    def authenticate(  # type: ignore[override]
        self, request: HttpRequest | None, username: str | None = None,
        password: str | None = None, **kwargs: Any,
    ) -> None:  # fmt: skip
        if request is None:
            return None
        return super().authenticate(request, username, password, **kwargs)


def token_attempt_allowed(request: HttpRequest) -> bool:
    """False once this address sent too many bad tokens: the answer becomes the 429 below."""
    if AxesProxyHandler.is_allowed(request, TOKEN_CREDENTIALS):
        return True
    request.axes_locked_out = True  # type: ignore[attr-defined]
    request.axes_credentials = TOKEN_CREDENTIALS  # type: ignore[attr-defined]
    return False


def token_failed(request: HttpRequest) -> None:
    """Count a bad token of this address, as a failed login is counted."""
    user_login_failed.send(sender=__name__, credentials=TOKEN_CREDENTIALS, request=request)


def retry_at(request: HttpRequest, credentials: dict[str, Any] | None) -> datetime:
    """When the lockout of this user name and address ends: the cool-off after its last failure."""
    last = AccessAttempt.objects.filter(
        username=get_client_username(request, credentials),
        ip_address=getattr(request, "axes_ip_address", None),
    ).aggregate(last=Max("attempt_time"))["last"]
    return (last or timezone.now()) + (get_cool_off(request) or timedelta(0))


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: dict[str, Any] | None
) -> HttpResponse:
    """axes' answer to a locked-out attempt (AXES_LOCKOUT_CALLABLE): JSON for the API, the login
    page with the time to retry for a browser."""
    at = retry_at(request, credentials)
    seconds = max(1, math.ceil((at - timezone.now()).total_seconds()))
    when = f"{timezone.localtime(at):%H:%M %Z} (in {_duration(seconds)})"
    response: HttpResponse
    if request.path.startswith("/api/"):
        detail = f"Too many bad API tokens from your address: try again after {when}."
        response = JsonResponse({"detail": detail, "errors": {}}, status=429)
    else:
        message = f"Too many failed logins for this user from your address: try again after {when}."
        form = AuthenticationForm(request, initial={"username": request.POST.get("username", "")})
        context = {"form": form, "lockout": message, "next": request.POST.get("next", "")}
        response = render(request, "registration/login.html", context, status=429)
    response["Retry-After"] = str(seconds)
    return response


def _duration(seconds: int) -> str:
    minutes = math.ceil(seconds / 60)
    if seconds < 60:
        return f"{seconds} seconds"
    return "1 minute" if minutes == 1 else f"{minutes} minutes"
