"""Addresses as shown and exported: the login of a URL (`https://user:secret@host/`) and the
values of secret-looking query parameters (token, signature, X-Amz-Signature...) are hidden; the
stored address, which the fetch uses, keeps them."""

from urllib.parse import unquote, urlsplit, urlunsplit

HIDDEN = "••••••••"
SECRET_WORDS = ("token", "signature", "secret", "passw", "pwd", "key", "credential", "auth",
                "session")  # fmt: skip
SECRET_NAMES = ("sig", "sv_sig", "code")  # Azure SAS signatures, one-time codes


def _secret(name: str) -> bool:
    name = unquote(name).lower()
    return name in SECRET_NAMES or any(word in name for word in SECRET_WORDS)


def url_redacted(url: str) -> str:
    """The URL with its login and its secret parameters' values hidden."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return HIDDEN  # not an address anyone should read back
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{HIDDEN}@{netloc.rsplit('@', 1)[1]}"
    query = "&".join(
        f"{name}={HIDDEN}" if equals and _secret(name) else f"{name}{equals}{value}"
        for name, equals, value in (piece.partition("=") for piece in parts.query.split("&"))
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
