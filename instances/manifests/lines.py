"""Where each field of a YAML document is: its line, so a problem points at the field itself."""

import yaml

Path = tuple[str | int, ...]


def field_lines(
    node: yaml.Node, path: Path = (), found: dict[Path, int] | None = None
) -> dict[Path, int]:
    """Every key's line (and every list item's), by its path from the document's root."""
    found = {} if found is None else found
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                found[(*path, key.value)] = key.start_mark.line + 1
                field_lines(value, (*path, key.value), found)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found[(*path, index)] = item.start_mark.line + 1
            field_lines(item, (*path, index), found)
    return found


def api_path(path: str) -> Path:
    """The API's notation as a path: nics-0-mac → ("nics", 0, "mac")."""
    return tuple(int(part) if part.isdigit() else part for part in path.split("-") if part)


def line_of(lines: dict[Path, int], path: str) -> int | None:
    """The line of the field at `path` (API notation), looked for under spec first, else at
    the top (kind, project, name); the nearest field above it when it is not written."""
    parts = api_path(path)
    if not parts:
        return None
    for root, shortest in ((("spec", *parts), 2), (parts, 1)):
        for end in range(len(root), shortest - 1, -1):
            if root[:end] in lines:
                return lines[root[:end]]
    return None
