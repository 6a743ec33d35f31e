"""Who may point a cloud account at another endpoint: the console sends signed requests there
from its own processes, so it is a superuser's setting, or a host the environment allows; and
for anyone, never an address the egress policy blocks (instances.egress)."""

from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser

from instances import egress

GOOGLE_TOKEN_URI = "https://oauth2.googleapis.com/token"


def may_set_any_endpoint(user: AbstractBaseUser | None) -> bool:
    """Superusers, and the management commands (no user), which the operator runs."""
    return user is None or bool(getattr(user, "is_superuser", False))


def url_problem(url: str, *, sandbox: bool = False) -> str:
    """Why no one may point an account at this URL ("" when one may): malformed, read two
    ways by different clients, a login in it, or an address the egress policy blocks (but for
    a sandbox account: the console's own fake cloud, which a superuser declares)."""
    try:
        parts = egress.split_url(url)
    except ValueError as error:
        return str(error)
    if parts.scheme not in ("http", "https") or not parts.host:
        return "Give an http:// or https:// address with a host."
    if "@" in urlsplit(url).netloc:
        return "Leave the login out of the endpoint URL: the account's keys sign its requests."
    return "" if sandbox else egress.literal_refusal(parts.host)


def allowed_host(url: str) -> bool:
    """The URL's host (or host:port) is in ZOPDAY_CLOUD_ENDPOINT_ALLOWLIST, as parsed the one
    way every client reads it (a URL that reads two ways is never allowed)."""
    if url_problem(url):
        return False
    parts = urlsplit(url)
    host, port = (parts.hostname or "").lower(), parts.port
    for entry in settings.ZOPDAY_CLOUD_ENDPOINT_ALLOWLIST:
        name, _, entry_port = entry.lower().rpartition(":")
        if entry_port.isdigit() and name:
            if host == name.strip("[]") and port == int(entry_port):
                return True
        elif host == entry.lower().strip("[]"):
            return True
    return False


def endpoint_refusal(url: str, user: AbstractBaseUser | None, *, sandbox: bool = False) -> str:
    """Why this user may not set the endpoint URL, or "" when they may."""
    if not url:
        return ""
    if problem := url_problem(url, sandbox=sandbox and may_set_any_endpoint(user)):
        return problem
    if may_set_any_endpoint(user) or allowed_host(url):
        return ""
    allowed = ", ".join(settings.ZOPDAY_CLOUD_ENDPOINT_ALLOWLIST)
    if allowed:
        return f"Only a superuser sets this endpoint: the hosts allowed here are {allowed}."
    return "Only a superuser sets an endpoint URL: leave it empty for the cloud's own."


def token_uri_refusal(token_uri: str, user: AbstractBaseUser | None) -> str:
    """A GCP key's token_uri is an endpoint too: Google's own, unless the user may set one."""
    if token_uri == GOOGLE_TOKEN_URI:
        return ""
    if problem := url_problem(token_uri):
        return f"The key's token_uri: {problem}"
    if endpoint_refusal(token_uri, user):
        return (
            f"The key's token_uri must be Google's ({GOOGLE_TOKEN_URI}); only a superuser "
            "sets another."
        )
    return ""
