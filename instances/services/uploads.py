"""Whether a request may send an upload-sized body: asked by the web server before it stores one,
from the request's path and credentials alone (Django has not seen the request yet)."""

import re
from importlib import import_module

from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest
from django.http.cookie import parse_cookie

from instances.access import project_for_user
from instances.choices import Role
from instances.services.tokens import api_token_authenticate

# The Images page (a session) and the API's upload (a token, else a session), as in the URLconfs
UPLOAD_PATH = re.compile(r"^/(?P<api>api/v1/)?projects/(?P<slug>[-\w]+)/images/?$")


def upload_allowed(*, path: str, cookie_header: str, authorization_header: str) -> bool:
    """True when path is an image upload's and the credentials name a user who may upload
    there (operator or above), as the page or API endpoint would decide."""
    match = UPLOAD_PATH.match(path)
    if match is None:
        return False
    if match["api"] and authorization_header:  # the API then ignores any session
        user = _token_user(authorization_header)
    else:
        user = _session_user(cookie_header)
    if not user.is_authenticated:
        return False
    try:
        project_for_user(user, match["slug"], Role.OPERATOR)
    except (Http404, PermissionDenied):
        return False
    return True


def _token_user(authorization_header: str) -> AbstractBaseUser | AnonymousUser:
    scheme, _, token = authorization_header.partition(" ")  # as ninja's HttpBearer reads it
    if scheme.lower() != "bearer":
        return AnonymousUser()
    return api_token_authenticate(plaintext=token) or AnonymousUser()


def _session_user(cookie_header: str) -> AbstractBaseUser | AnonymousUser:
    key = parse_cookie(cookie_header).get(settings.SESSION_COOKIE_NAME)
    if not key:
        return AnonymousUser()
    request = HttpRequest()  # Django's own lookup: the session engine, backend and auth hash
    request.session = import_module(settings.SESSION_ENGINE).SessionStore(key)
    return get_user(request)
