"""A Kubernetes document's fields with their YAML lines, and which of them were read.

Whatever the VirtualMachine reader does not read is left over, and each leftover field is
refused at its line: a field the console cannot map is never dropped silently.
"""

from typing import Any

import yaml

from instances.manifests.errors import Problem
from instances.manifests.lines import Path, field_lines

_MISSING = object()


def dotted(path: Path) -> str:
    """("spec", "template", 0, "name") → spec.template[0].name, as the API server names fields."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.lstrip(".")


class Fields:
    """One document: `get` reads a field (and marks it read), `problem` locates a message at a
    field's line, `leftover` lists the fields nobody read."""

    def __init__(self, source: str, start: int, data: dict[str, Any], node: yaml.Node | None):
        self.source, self.start, self.data = source, start, data
        self.lines: dict[Path, int] = field_lines(node) if node is not None else {}
        self.read: set[Path] = set()

    def get(self, *path: str | int, default: Any = None) -> Any:
        node: Any = self.data
        for part in path:
            if isinstance(part, int):
                if not isinstance(node, list) or part >= len(node):
                    return default
                node = node[part]
            else:
                if not isinstance(node, dict) or part not in node:
                    return default
                node = node[part]
        self.read.add(path)
        return node

    def has(self, *path: str | int) -> bool:
        return self.get(*path, default=_MISSING) is not _MISSING

    def at(self, path: Path) -> str:
        for end in range(len(path), 0, -1):
            if path[:end] in self.lines:
                return f"{self.source}:{self.lines[path[:end]]}"
        return f"{self.source}:{self.start}"

    def problem(self, path: Path, message: str) -> Problem:
        return Problem(self.at(path), dotted(path), message)

    def leftover(self) -> list[Path]:
        """Every field (or empty mapping or list) under no path that was read."""
        found: list[Path] = []

        def walk(value: Any, path: Path) -> None:
            if path in self.read:
                return
            if isinstance(value, dict) and value:
                for key, item in value.items():
                    walk(item, (*path, key))
            elif isinstance(value, list) and value:
                for index, item in enumerate(value):
                    walk(item, (*path, index))
            else:
                found.append(path)

        walk(self.data, ())
        return found

    def placeholders(self, marker: str) -> list[Path]:
        """The fields whose text still holds `marker` (an export's fill-in placeholder)."""
        found: list[Path] = []

        def walk(value: Any, path: Path) -> None:
            if isinstance(value, dict):
                for key, item in value.items():
                    walk(item, (*path, key))
            elif isinstance(value, list):
                for index, item in enumerate(value):
                    walk(item, (*path, index))
            elif isinstance(value, str) and marker in value:
                found.append(path)

        walk(self.data, ())
        return found


def placeholder_problems(fields: Fields, marker: str) -> list[Problem]:
    return [
        fields.problem(path, "Fill in this placeholder of the export first.")
        for path in fields.placeholders(marker)
    ]


def leftover_problems(fields: Fields) -> list[Problem]:
    return [
        fields.problem(path, "The console has no setting for this field; remove it.")
        for path in fields.leftover()
    ]
