"""Who may point a cloud account at another endpoint: the console sends signed requests there
from its own processes, so it is a superuser's setting, or a host the environment allows."""

from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser

GOOGLE_TOKEN_URI = "https://oauth2.googleapis.com/token"


def may_set_any_endpoint(user: AbstractBaseUser | None) -> bool:
    """Superusers, and the management commands (no user), which the operator runs."""
    return user is None or bool(getattr(user, "is_superuser", False))


def allowed_host(url: str) -> bool:
    """The URL's host (or host:port) is in ZOPDAY_CLOUD_ENDPOINT_ALLOWLIST."""
    try:
        parts = urlsplit(url)
        host, port = (parts.hostname or "").lower(), parts.port
    except ValueError:
        return False
    for entry in settings.ZOPDAY_CLOUD_ENDPOINT_ALLOWLIST:
        name, _, entry_port = entry.lower().rpartition(":")
        if entry_port.isdigit() and name:
            if host == name.strip("[]") and port == int(entry_port):
                return True
        elif host == entry.lower().strip("[]"):
            return True
    return False


def endpoint_refusal(url: str, user: AbstractBaseUser | None) -> str:
    """Why this user may not set the endpoint URL, or "" when they may."""
    if not url or may_set_any_endpoint(user) or allowed_host(url):
        return ""
    allowed = ", ".join(settings.ZOPDAY_CLOUD_ENDPOINT_ALLOWLIST)
    if allowed:
        return f"Only a superuser sets this endpoint: the hosts allowed here are {allowed}."
    return "Only a superuser sets an endpoint URL: leave it empty for the cloud's own."


def token_uri_refusal(token_uri: str, user: AbstractBaseUser | None) -> str:
    """A GCP key's token_uri is an endpoint too: Google's own, unless the user may set one."""
    if token_uri == GOOGLE_TOKEN_URI:
        return ""
    if endpoint_refusal(token_uri, user):
        return (
            f"The key's token_uri must be Google's ({GOOGLE_TOKEN_URI}); only a superuser "
            "sets another."
        )
    return ""
