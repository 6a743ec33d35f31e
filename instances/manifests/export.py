"""Exporting objects as the manifests `apply` takes back unchanged: one document each (kind,
project, name, spec), a whole project in the order apply runs them."""

from typing import Any

import yaml

from instances.manifests.kinds import KINDS, Kind, kinds_in_order
from instances.models import Project

HEADER = "# Exported by the ZopDay console: `manage.py apply -f` takes it back unchanged.\n"


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    """Text, and the console's choices (str enums) as their values; multi-line as a block."""
    text = str(value)
    return dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None
    )


_Dumper.add_representer(str, _text)
_Dumper.add_multi_representer(str, _text)


def document_of(kind: Kind, obj: Any, project: Project, *, redact: bool) -> dict[str, Any]:
    return {
        "kind": kind.name,
        "project": project.slug,
        "name": kind.name_of(obj),
        "spec": kind.spec_of(obj, redact),
    }


def manifest_text(documents: list[dict[str, Any]]) -> str:
    text = yaml.dump_all(
        documents, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True,
        explicit_start=True,
    )  # fmt: skip
    return HEADER + text


def project_manifest(project: Project, *, redact: bool) -> str:
    """Every object of the project, kind by kind in the order apply runs them."""
    return manifest_text(
        [
            document_of(kind, obj, project, redact=redact)
            for kind in kinds_in_order()
            for obj in kind.objects(project)
        ]
    )


def object_manifest(kind_name: str, project: Project, name: str, *, redact: bool) -> str | None:
    """One object's document, or None when the project has no such object."""
    kind = KINDS.get(kind_name)
    obj = kind.find(project, name) if kind else None
    if kind is None or obj is None:
        return None
    return manifest_text([document_of(kind, obj, project, redact=redact)])
