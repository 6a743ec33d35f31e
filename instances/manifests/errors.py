"""What is wrong with a manifest, said the way the API says it: a field path and a message."""

from collections.abc import Mapping
from dataclasses import dataclass

from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import ValidationError as DjangoValidationError
from pydantic import ValidationError as SchemaValidationError

from instances.errors import ActionRefused


@dataclass(frozen=True)
class Problem:
    """One message about one document, at a field path in the API's notation (`nics-0-mac`);
    an empty path is about the document (or the file) as a whole."""

    where: str
    path: str
    message: str

    def __str__(self) -> str:
        return ": ".join(part for part in (self.where, self.path, self.message) if part)


class ManifestInvalid(Exception):
    """The manifest cannot be applied; nothing was changed. `in_the_text`: some problem lies in
    the text alone (unreadable YAML, its bounds, a document's shape), so only new text mends it."""

    def __init__(self, problems: list[Problem], *, in_the_text: bool = False) -> None:
        super().__init__("\n".join(str(problem) for problem in problems))
        self.problems = problems
        self.in_the_text = in_the_text


def schema_problems(error: SchemaValidationError, where: str) -> list[Problem]:
    """pydantic's messages keyed like the API's 422 answers: ("nics", 0, "mac") → nics-0-mac."""
    return [
        Problem(where, "-".join(str(part) for part in detail["loc"]), detail["msg"])
        for detail in error.errors()
    ]


def service_problems(
    error: DjangoValidationError | ActionRefused,
    where: str,
    *,
    path: str = "",
    prefix: str = "",
    keys: Mapping[str, str] | None = None,
    hint: str = "",
) -> list[Problem]:
    """A service's refusal at `path`, its field errors keyed under `prefix` (`disks-0` +
    `size_gb`) unless `keys` renames them; `hint` says what to do in the manifest."""
    suffix = f" ({hint})" if hint else ""
    if isinstance(error, ActionRefused):
        return [Problem(where, path, error.message + suffix)]
    if not hasattr(error, "error_dict"):
        return [Problem(where, path, message + suffix) for message in error.messages]
    keys = keys or {}

    def key_of(key: str) -> str:
        if key == NON_FIELD_ERRORS:
            return path
        if key in keys:
            return keys[key]
        return f"{prefix}-{key}" if prefix else key

    return [
        Problem(where, key_of(key), message + suffix)
        for key, messages in error.message_dict.items()
        for message in messages
    ]
