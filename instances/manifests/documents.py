"""Reading manifests: YAML documents (`---` between them), each checked against DocumentIn.

Problems are collected over every document of every file, each located as `file:line`, so one run
reports everything to fix. A YAML syntax error ends the reading of its file, which cannot be
trusted past that point.
"""

import re
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any

import yaml
from pydantic import ValidationError as SchemaValidationError

from instances.bounded_yaml import BoundedLoader, YamlRefused
from instances.manifests.errors import ManifestInvalid, Problem, schema_problems
from instances.manifests.lines import Path, field_lines, line_of
from instances.manifests.schemas import DocumentIn
from instances.manifests.vm_import import kubernetes_documents

MERGE_TAG = "tag:yaml.org,2002:merge"


def kind_label(kind: str) -> str:
    """How a diff and a problem name the kind: SSHKey → ssh-key, ElasticIP → elastic-ip."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", kind).lower()


@dataclass(frozen=True)
class Document:
    """One object the manifest declares; `spec` is checked later, in its project. `lines` are
    its fields' lines (none for a Kubernetes document, whose reader locates its own)."""

    where: str
    project: str
    name: str
    spec: dict[str, Any]
    kind: str = "Instance"
    source: str = ""
    lines: dict[Path, int] = field(default_factory=dict, compare=False, repr=False)

    def at(self, path: str) -> str:
        """Where the field at `path` (API notation) is written: its own line."""
        line = line_of(self.lines, path)
        if line is None:
            return self.where
        return f"{self.source}:{line} ({kind_label(self.kind)} {self.name})"

    def located(self, problems: list[Problem]) -> list[Problem]:
        """This document's problems moved to their fields' lines."""
        return [
            replace(problem, where=self.at(problem.path))
            if problem.where == self.where
            else problem
            for problem in problems
        ]


class _StrictLoader(BoundedLoader):
    """The bounded loader, also refusing a key given twice in one mapping, which YAML would
    quietly resolve to the last value."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(source: str, error: yaml.YAMLError) -> Problem:
    mark = getattr(error, "problem_mark", None)
    where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
    if isinstance(error, YamlRefused):
        return Problem(where, "", f"{error.problem}.")
    if isinstance(error, yaml.MarkedYAMLError) and mark is not None:
        context = f" ({error.context})" if error.context else ""
        return Problem(where, "", f"Invalid YAML: {error.problem}{context}.")
    return Problem(source, "", f"Invalid YAML: {error}")


Found = tuple[str, Any, dict[Path, int]]


def _read(source: str, text: str) -> tuple[list[Found], list[Problem]]:
    """The documents of one file, each with where it starts and its fields' lines; empty
    documents are skipped."""
    found: list[Found] = []
    try:
        loader = _StrictLoader(text)
    except YamlRefused as error:
        return found, [_yaml_problem(source, error)]
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                break
            data = loader.construct_document(node)
            if data is not None:
                found.append((f"{source}:{node.start_mark.line + 1}", data, field_lines(node)))
    except yaml.YAMLError as error:
        return found, [_yaml_problem(source, error)]
    finally:
        loader.dispose()
    if not found:
        return found, [
            Problem(source, "", "No documents: expected at least one, such as kind: Instance.")
        ]
    return found, []


def _is_kubernetes(data: object) -> bool:
    """A Kubernetes object (a VirtualMachine and its companions), not a `kind: Instance`."""
    return isinstance(data, dict) and "apiVersion" in data


def documents_read(
    *, sources: list[tuple[str, str]], kinds: Collection[str], unknown_kind: str = ""
) -> list[Document]:
    """Parse every (name, text) source, each of one of `kinds` (else `unknown_kind` says
    which); raise ManifestInvalid listing every problem found."""
    documents: list[Document] = []
    problems: list[Problem] = []
    first_seen: dict[tuple[str, str, str], str] = {}
    from_vms = 0  # a VM's problems may lie in the console (its project may be made later)
    for source, text in sources:
        found, unreadable = _read(source, text)
        problems += unreadable
        kubernetes = [(where, data) for where, data, _ in found if _is_kubernetes(data)]
        if kubernetes:
            from_kubernetes, refused = kubernetes_documents(source, text, kubernetes)
            problems += refused
            from_vms += len(refused)
            for document in (Document(*declared) for declared in from_kubernetes):
                key = (document.kind, document.project, document.name)
                if key in first_seen:
                    message = f"{document.name} is declared twice: also at {first_seen[key]}."
                    problems.append(Problem(document.where, "name", message))
                    from_vms += 1
                    continue
                first_seen[key] = document.where
                documents.append(document)
        for where, data, lines in found:
            if _is_kubernetes(data):
                continue
            if not isinstance(data, dict):
                problems.append(
                    Problem(where, "", "A document is a mapping: kind, project, name and spec.")
                )
                continue
            try:
                envelope = DocumentIn.model_validate(data)
            except SchemaValidationError as error:
                problems += [
                    replace(problem, where=f"{source}:{line}")
                    if (line := line_of(lines, problem.path))
                    else problem
                    for problem in schema_problems(error, where)
                ]
                if isinstance(data.get("kind"), str) and data["kind"] not in kinds:
                    line = lines.get(("kind",), int(where.rsplit(":", 1)[1]))
                    problems.append(Problem(f"{source}:{line}", "kind", unknown_kind))
                continue
            if envelope.kind not in kinds:
                problems.append(Problem(f"{source}:{lines[('kind',)]}", "kind", unknown_kind))
                continue
            where = f"{where} ({kind_label(envelope.kind)} {envelope.name})"
            document = Document(
                where, envelope.project, envelope.name, envelope.spec, envelope.kind, source, lines
            )
            key = (envelope.kind, envelope.project, envelope.name)
            if key in first_seen:
                message = f"{envelope.name} is declared twice: also at {first_seen[key]}."
                problems.append(Problem(document.at("name"), "name", message))
                continue
            first_seen[key] = where
            documents.append(document)
    if problems:
        raise ManifestInvalid(problems, in_the_text=len(problems) > from_vms)
    return documents
