"""Checking a document's spec against the API's body schema, as every kind does: the name is
given once, at the top; names of other objects have become ids; the API's messages."""

from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic import ValidationError as SchemaValidationError

from instances.manifests.documents import Document
from instances.manifests.errors import ManifestInvalid, Problem, schema_problems

S = TypeVar("S", bound=BaseModel)


def spec_checked(
    document: Document,
    schema: type[S],
    raw: dict[str, Any] | None = None,
    unknown: dict[str, str] | None = None,
    *,
    named: bool = True,
) -> S:
    """The spec (`raw`: its copy with names made ids) as the schema reads it, or every problem;
    `unknown` holds the names not found, reported once rather than again as "not an integer".
    `named`: the schema has the API's `name` field, filled from the document's."""
    where = document.where
    unknown = unknown or {}
    if "name" in document.spec and named:
        message = "Give the name once, at the top of the document, not in spec."
        raise ManifestInvalid([Problem(where, "name", message)])
    raw = dict(document.spec if raw is None else raw)
    if named:
        raw["name"] = document.name
    problems = [Problem(where, path, message) for path, message in unknown.items()]
    try:
        spec = schema.model_validate(raw)
    except SchemaValidationError as error:
        problems += [
            problem
            for problem in schema_problems(error, where)
            if not any(
                problem.path == path or problem.path.startswith(f"{path}-") for path in unknown
            )
        ]
        spec = None
    if problems or spec is None:
        raise ManifestInvalid(problems)
    return spec


def shown(value: object) -> str:
    if value is None or value == "":
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def fixed_problems(
    document: Document, label: str, differences: dict[str, tuple[object, object]]
) -> list[Problem]:
    """Fields no service changes, that differ: each a problem at its field."""
    return [
        Problem(
            document.where,
            field,
            f"Cannot change on an existing {label}: {document.name} has {shown(current)}, the "
            f"manifest says {shown(wanted)}. Keep {shown(current)}, or create a new {label} "
            "under another name.",
        )
        for field, (current, wanted) in differences.items()
        if current != wanted
    ]


def raise_if(problems: list[Problem]) -> None:
    if problems:
        raise ManifestInvalid(problems)
