"""Running `manage.py apply` on a manifest written to instance.yaml, as a person would."""

import io
import textwrap
from dataclasses import dataclass

import pytest
from django.core.management import CommandError, call_command

from tests.factories import ImageFactory

MANIFEST = """\
kind: Instance
project: alpha
name: web-1
spec:
  zone: local-1a
  root_image: demo
  root_size_gb: 2
  disks:
    - {name: web-1-data, size_gb: 10}
  nics:
    - {subnet: backend}
"""


@dataclass
class Refusal:
    """What a refused run printed: one problem a line, and the command's own error."""

    problems: list[str]
    error: str


@pytest.fixture
def image():
    """A shared image, usable by every project, named as the manifests name it."""
    return ImageFactory(name="demo")


@pytest.fixture
def apply(request, tmp_path, monkeypatch, subnet, image):
    """apply(text, "--dry-run", user="viewer") → the command's output; the manifest is written
    to instance.yaml in the current folder, which is what the problems name."""
    monkeypatch.chdir(tmp_path)

    def run(text: str, *flags: str, user: str = "operator") -> str:
        request.getfixturevalue(user)
        (tmp_path / "instance.yaml").write_text(textwrap.dedent(text))
        out = io.StringIO()
        call_command("apply", "-f", "instance.yaml", "--user", user, *flags, stdout=out)
        return out.getvalue()

    return run


@pytest.fixture
def refused(request, tmp_path, monkeypatch, subnet, image):
    """refused(text) → the Refusal of a run that must fail (it asserts it does)."""
    monkeypatch.chdir(tmp_path)

    def run(text: str, *flags: str, user: str = "operator") -> Refusal:
        request.getfixturevalue(user)
        (tmp_path / "instance.yaml").write_text(textwrap.dedent(text))
        err = io.StringIO()
        with pytest.raises(CommandError) as raised:
            call_command(
                "apply", "-f", "instance.yaml", "--user", user, *flags, stdout=io.StringIO(),
                stderr=err,
            )  # fmt: skip
        return Refusal(err.getvalue().splitlines(), str(raised.value))

    return run


@pytest.fixture
def api(api_for):
    """The operator's API client, to compare the manifest's messages with the API's."""
    return api_for("operator")
