"""Hostile YAML for the tests: the billion laughs and nesting 10,000 deep."""

LEVELS = 9  # 10 strings, then nine levels of ten aliases each: 10**10 strings once expanded


def billion_laughs(indent: str = "") -> str:
    """Mapping lines (each starting with `indent`): `l0` holds ten strings, each next key ten
    aliases of the one before. The first alias is on the second line."""
    lines = [f"{indent}l0: &l0 [{', '.join(['lol'] * 10)}]"]
    for level in range(1, LEVELS + 1):
        lines.append(f"{indent}l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 10)}]")
    return "\n".join(lines) + "\n"


def nested(depth: int = 10_000) -> str:
    """A flow list nested `depth` deep, on one line."""
    return "[" * depth + "]" * depth
