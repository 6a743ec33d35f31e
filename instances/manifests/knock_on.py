"""Knock-on problems: a document that names an object whose own document failed in the same run
is told so, not told to choose another object."""

from dataclasses import replace
from typing import Any

from instances.manifests.documents import Document, kind_label
from instances.manifests.errors import Problem
from instances.manifests.lines import api_path

# The field a reference is written in → the kind it names ("nic: web-1/eth0" names an instance).
REFERENCES = {
    "subnet": "Subnet",
    "ssh_keys": "SSHKey",
    "image": "Image",
    "root_image": "Image",
    "nic": "Instance",
}

Failed = dict[tuple[str, str, str], str]  # (kind, project, name) → where its document is


def _value(spec: dict[str, Any], path: str) -> object:
    value: object = spec
    for part in api_path(path):
        if isinstance(value, dict) and isinstance(part, str):
            value = value.get(part)
        elif isinstance(value, list) and isinstance(part, int) and part < len(value):
            value = value[part]
        else:
            return None
    return value


def knock_on_explained(
    document: Document, problems: list[Problem], failed: Failed
) -> list[Problem]:
    """The document's problems, each about a name whose document failed saying that instead."""
    explained = []
    for problem in problems:
        parts = [part for part in api_path(problem.path) if isinstance(part, str)]
        kind = REFERENCES.get(parts[-1]) if parts else None
        value = _value(document.spec, problem.path)
        names = value if isinstance(value, list) else [value]
        if kind == "Instance":
            names = [name.partition("/")[0] if isinstance(name, str) else name for name in names]
        where = next(
            (
                (name, failed[(kind, document.project, name)])
                for name in names
                if kind and isinstance(name, str) and (kind, document.project, name) in failed
            ),
            None,
        )
        if where is not None:
            message = (
                f"The {kind_label(kind or '')} {where[0]} was not made, because its own document "
                f"failed: see {where[1]}."
            )
            problem = replace(problem, message=message)
        explained.append(problem)
    return explained
