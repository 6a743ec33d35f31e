"""Reading settings from the environment: a string, a flag, a number or a comma-separated list,
each with the default the embedded mode runs on."""

import os
from pathlib import Path


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def envint(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def envlist(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if not value:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def run_dir() -> Path:
    """The run folder (ZOPDAY_RUN_DIR, else var/ beside the code), made if missing."""
    path = Path(env("ZOPDAY_RUN_DIR", str(Path(__file__).resolve().parent.parent / "var")))
    path = path.resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path
