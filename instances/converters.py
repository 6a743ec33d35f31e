"""Path converters of the console's URLs."""

from urllib.parse import quote, unquote


class ObjectName:
    """A name as one path segment: "/" and "%" escaped on the way out (a name stored before
    names were checked may hold them), unescaped on the way in."""

    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        return unquote(value)

    def to_url(self, value: str) -> str:
        return quote(value, safe="")
