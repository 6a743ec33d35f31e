"""A plan: the diff of one document and the service calls that make each of its lines true."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError

from instances.errors import ActionRefused
from instances.manifests.documents import Document, kind_label
from instances.manifests.errors import Problem, service_problems

# How a plan's header marks what happens to the instance.
MARKS = {"create": "+", "change": "~", "unchanged": " ", "delete": "-"}


@dataclass(frozen=True)
class Step:
    """One service call, and where its errors belong in the manifest (see service_problems)."""

    run: Callable[[], object]
    path: str = ""
    prefix: str = ""
    keys: Mapping[str, str] = field(default_factory=dict)
    hint: str = ""

    def problems(self, error: ValidationError | ActionRefused, where: str) -> list[Problem]:
        return service_problems(
            error, where, path=self.path, prefix=self.prefix, keys=self.keys, hint=self.hint
        )


@dataclass
class Plan:
    """What one document changes: `verb` is create, change, unchanged or delete (pruned);
    `lines` the diff, `steps` the calls, in the order they run."""

    document: Document
    label: str
    verb: str = "unchanged"
    lines: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)

    def diff(self) -> list[str]:
        header = f"{MARKS[self.verb]} {kind_label(self.document.kind)} {self.label} ({self.verb})"
        return [header, *(f"    {line}" for line in self.lines)]
