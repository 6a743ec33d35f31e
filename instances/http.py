from django.contrib.auth.models import User
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class AuthedRequest(HttpRequest):
    """The request a view behind login_required gets, after the htmx middleware."""

    user: User
    htmx: HtmxDetails
