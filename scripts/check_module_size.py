"""Fail when a Python module passes 400 lines: such a module has seams, and is to be split.

Tests, benchmarks and migrations are exempt. Run by `bin/zop test` and the pre-commit hook:
`python scripts/check_module_size.py [ROOT]` lists each module over the limit and exits 1.
"""

import sys
from pathlib import Path

LIMIT = 400
EXEMPT = {"tests", "benchmarks", "migrations"}
NOT_OURS = {"var", "static", "node_modules", "__pycache__"}


def modules(root: Path) -> list[Path]:
    """The project's own Python files under root, exempt folders and hidden ones left out."""
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts[:-1]
        if any(part.startswith(".") or part in EXEMPT | NOT_OURS for part in parts):
            continue
        found.append(path)
    return found


def oversized(root: Path, limit: int = LIMIT) -> list[tuple[Path, int]]:
    """(path relative to root, line count) of each module over the limit, longest first."""
    counts = []
    for path in modules(root):
        with path.open("rb") as source:
            lines = sum(1 for _ in source)
        if lines > limit:
            counts.append((path.relative_to(root), lines))
    return sorted(counts, key=lambda count: -count[1])


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    found = oversized(root)
    for path, lines in found:
        print(f"{path}: {lines} lines (limit {LIMIT}): split it along its seams")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
