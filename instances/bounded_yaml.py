"""The one loader for YAML the console did not write (manifests, repositories, user data, network
configs): no aliases, nesting at most MAX_DEPTH deep, at most MAX_BYTES. Each refusal is a YAML
error at its line, so a billion-laughs or a 10,000-deep document is a message, never a hang."""

from collections.abc import Iterator
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.resolver import Resolver

try:  # libyaml parses (PyYAML's wheels carry it); the composer, where the bounds are, is Python
    from yaml._yaml import CParser as _Parser
except ImportError:  # pragma: no cover
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, Parser):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)


MAX_BYTES = 5 * 1024 * 1024  # as much as all of a commit's manifests together
MAX_DEPTH = 64  # a VirtualMachine's deepest field is about 10 levels down
ALIAS = "Aliases (*{name}) are not accepted: write the value out where it is used"
DEPTH = f"Lists and mappings nest over {MAX_DEPTH} levels deep here: keep to a few levels"
SIZE = f"The text is over {MAX_BYTES // (1024 * 1024)} MiB: split it into smaller files"
INT_TAG = "tag:yaml.org,2002:int"


class YamlRefused(yaml.MarkedYAMLError):
    """YAML refused for a bound, not for its syntax; `problem` is a sentence (no final stop)."""

    def __init__(self, problem: str, mark: Any = None) -> None:
        super().__init__(problem=problem, problem_mark=mark)


class BoundedLoader(_Parser, Composer, SafeConstructor, Resolver):
    """SafeLoader within the bounds: an alias, a node nested too deep or a number too long to
    read stops the reading at its line."""

    def __init__(self, stream: str) -> None:
        if len(stream) > MAX_BYTES:
            raise YamlRefused(SIZE)
        _Parser.__init__(self, stream)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.depth = 0

    # the Python composer, not libyaml's, so that compose_node below is the one called
    check_node = Composer.check_node
    get_node = Composer.get_node
    get_single_node = Composer.get_single_node

    def check_event(self, *choices: Any) -> bool:
        return bool(self._nesting_told(_Parser.check_event, *choices))

    def peek_event(self) -> Any:
        return self._nesting_told(_Parser.peek_event)

    def get_event(self) -> Any:
        return self._nesting_told(_Parser.get_event)

    def _nesting_told(self, read: Any, *args: Any) -> Any:
        """libyaml stops flow nesting 1,000 deep, before the composer's count: the same words."""
        try:
            return read(self, *args)
        except yaml.scanner.ScannerError as error:
            if "nesting depth" not in str(error.problem):
                raise
            raise YamlRefused(DEPTH, error.problem_mark) from None

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise YamlRefused(ALIAS.format(name=event.anchor), event.start_mark)
        if self.depth >= MAX_DEPTH:
            raise YamlRefused(DEPTH, event.start_mark)
        self.depth += 1
        try:
            return Composer.compose_node(self, parent, index)
        finally:
            self.depth -= 1

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # over Python's 4,300 digits
            raise ConstructorError(
                None, None, "a number too long to read", node.start_mark
            ) from None

    yaml_constructors = {**SafeConstructor.yaml_constructors, INT_TAG: construct_yaml_int}


def _read(text: str, read: Any) -> Any:
    loader = BoundedLoader(text)
    try:
        return read(loader)
    finally:
        loader.dispose()


def yaml_load(text: str) -> Any:
    """The one document of `text` as Python objects (None when empty)."""
    return _read(text, BoundedLoader.get_single_data)


def yaml_compose(text: str) -> yaml.Node | None:
    """The one document of `text` as its node graph."""
    return _read(text, BoundedLoader.get_single_node)  # type: ignore[no-any-return]


def yaml_compose_all(text: str) -> Iterator[yaml.Node]:
    """Each document of `text` as its node graph."""
    loader = BoundedLoader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is not None:
                yield node
    finally:
        loader.dispose()


def yaml_problem(error: yaml.YAMLError) -> str:
    """What is wrong, as a sentence naming the line: `… (line 3, column 5).`"""
    mark = getattr(error, "problem_mark", None)
    if isinstance(error, YamlRefused):
        return f"{error.problem}{f' (line {mark.line + 1})' if mark is not None else ''}."
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    problem = getattr(error, "problem", None) or "it does not parse"
    return f"Invalid YAML{where}: {problem}."
