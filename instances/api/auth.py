"""Who is calling: a personal API token (`Authorization: Bearer zop_...`) or the browser session.

A session only counts with a valid CSRF token on unsafe methods, as for the pages. A request
without either is 401; a token that is wrong, expired or belongs to an inactive user is 401 too,
even when a session cookie came along, so a script never silently acts as someone else. Too many
wrong secrets for one token, or unknown tokens from one address, are answered 429 with
Retry-After for a while; other tokens from that address keep working.
"""

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, User
from django.http import HttpRequest
from ninja.errors import AuthenticationError
from ninja.security import HttpBearer
from ninja.security import SessionAuth as NinjaSessionAuth

from instances.access import project_for_user
from instances.choices import Role
from instances.services.tokens import api_token_authenticate
from instances.throttle import token_attempt_allowed, token_credentials, token_failed


class ApiTokenAuth(HttpBearer):
    """A token, unless it (or, for an unknown one, its address) failed too often: 429 from
    axes' middleware."""

    def authenticate(self, request: HttpRequest, token: str) -> User:
        credentials = token_credentials(token)
        if not token_attempt_allowed(request, credentials):
            raise AuthenticationError(message="Too many bad API tokens.")
        user = api_token_authenticate(plaintext=token)
        if user is None:
            token_failed(request, credentials)
            raise AuthenticationError(message="The API token is invalid or has expired.")
        request.user = user
        return user


class SessionAuth(NinjaSessionAuth):
    """ninja's session auth, but the CSRF check runs only for a logged-in session, so that an
    anonymous POST is answered 401 (who are you?) rather than 403 (CSRF)."""

    def __call__(self, request: HttpRequest) -> Any:
        if not request.user.is_authenticated:
            return None
        return super().__call__(request)


def request_user(request: HttpRequest) -> AbstractBaseUser:
    """The authenticated caller (every endpoint requires one of the auths above)."""
    user = request.user
    if not isinstance(user, AbstractBaseUser) or not user.is_authenticated:
        raise AuthenticationError()  # only reached by an endpoint declared without auth
    return user


API_AUTH = [ApiTokenAuth(), SessionAuth()]


class TokenRoleFirst(ApiTokenAuth):
    """A token whose user holds `required` in the project the path's slug names."""

    def __init__(self, required: Role) -> None:
        super().__init__()
        self.required = required

    def authenticate(self, request: HttpRequest, token: str) -> User:
        user = super().authenticate(request, token)
        _require_path_role(request, self.required)
        return user


class SessionRoleFirst(SessionAuth):
    """A session whose user holds `required` in the project the path's slug names, checked
    before the CSRF check (which reads the body for its token)."""

    def __init__(self, required: Role) -> None:
        super().__init__()
        self.required = required

    def __call__(self, request: HttpRequest) -> Any:
        if request.user.is_authenticated:
            _require_path_role(request, self.required)
        return super().__call__(request)


def role_first_auth(required: Role) -> list[Any]:
    """API_AUTH for a route with a large body (an upload): the caller's role in the project is
    checked before any of the body is read (ninja reads it before the endpoint runs)."""
    return [TokenRoleFirst(required), SessionRoleFirst(required)]


def _require_path_role(request: HttpRequest, required: Role) -> None:
    slug = request.resolver_match.kwargs["slug"] if request.resolver_match else ""
    project_for_user(request.user, slug, required)  # type: ignore[arg-type]
