"""Throttled logins and API tokens, counted by django-axes per address: logins per user name, a
known token's wrong secrets per token, unknown tokens together. Past the limit the login page and
the API answer 429 with Retry-After and say when to try again."""

import math
from datetime import datetime, timedelta
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.handlers.database import AxesDatabaseHandler
from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_client_parameters, get_client_username, get_cool_off
from axes.models import AccessAttempt
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_login_failed
from django.db.models import Max, Q
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone

from instances.disk_full import unless_disk_full
from instances.services.tokens import api_token_known_prefix

# What token failures are counted under: no user can have these names (spaces and brackets are
# not allowed in one), so bad tokens never lock a real user out. Unknown tokens count against
# their address; a known token's wrong secrets against that token from that address, so one who
# knows a token's prefix locks only his own address out of it, and his address's failures never
# lock out the other tokens sent from it.
TOKEN_USERNAME = "(api token)"
TOKEN_CREDENTIALS = {"username": TOKEN_USERNAME}
KNOWN_TOKEN_USERNAME = "(api token {prefix})"


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


def _names_known_token(username: str) -> bool:
    return username.startswith("(api token ") and username != TOKEN_USERNAME


def token_credentials(plaintext: str) -> dict[str, str]:
    """The count a presented token's failures go to: the token its prefix names, else the
    address's unknown tokens."""
    prefix = api_token_known_prefix(plaintext=plaintext)
    if prefix is None:
        return TOKEN_CREDENTIALS
    return {"username": KNOWN_TOKEN_USERNAME.format(prefix=prefix)}


def token_attempt_allowed(request: HttpRequest, credentials: dict[str, str]) -> bool:
    """False once these credentials failed too often: the answer becomes the 429 below."""
    if AxesProxyHandler.is_allowed(request, credentials):
        return True
    request.axes_locked_out = True  # type: ignore[attr-defined]
    request.axes_credentials = credentials  # type: ignore[attr-defined]
    return False


def token_failed(request: HttpRequest, credentials: dict[str, str]) -> None:
    """Count a bad token, as a failed login is counted."""
    user_login_failed.send(sender=__name__, credentials=credentials, request=request)


def retry_at(request: HttpRequest, credentials: dict[str, Any] | None) -> datetime:
    """When the lockout of these credentials ends: the cool-off after their last failure."""
    matching = Q()
    for kwargs in get_client_parameters(
        get_client_username(request, credentials),
        getattr(request, "axes_ip_address", None),  # type: ignore[arg-type]
        getattr(request, "axes_user_agent", ""),
        request,
        credentials,
    ):
        matching |= Q(**kwargs)
    last = AccessAttempt.objects.filter(matching).aggregate(last=Max("attempt_time"))["last"]
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
    username = str((credentials or {}).get("username", ""))
    if request.path.startswith("/api/") and _names_known_token(username):
        detail = (
            f"Too many bad secrets for this API token from your address: try again after {when}."
        )
        response = JsonResponse({"detail": detail, "errors": {}}, status=429)
    elif request.path.startswith("/api/"):
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
