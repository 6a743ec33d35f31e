"""`manage.py apply -f instance.yaml --user USERNAME [--dry-run]`: make instances match their
manifests, through the services (instances.manifests does the work)."""

import os
import sys
from argparse import RawDescriptionHelpFormatter
from collections import Counter
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.management.base import (
    BaseCommand,
    CommandError,
    CommandParser,
    DjangoHelpFormatter,
)

from instances.manifests import ManifestInvalid, manifest_apply

USER_VARIABLE = "ZOPDAY_USER"

HELP = """\
Create or update instances, with their disks and network interfaces, from YAML manifests.

Each document (documents are separated by ---) declares one instance:

  kind: Instance
  project: demo
  name: web-1
  spec:
    zone: local-1a
    run_strategy: Always
    root_image: demo            # images, subnets and SSH keys by name or id
    root_size_gb: 2
    disks:
      - {name: web-1-data, size_gb: 10}
    nics:
      - {subnet: backend}       # eth0
      - {subnet: backend, model: e1000}

spec takes the fields of the API's instance body (InstanceIn, DiskIn, NicIn) with the API's
messages, and refuses fields it does not know; an interface also takes link (up or down) and
confirm_primary. A missing instance is created. An existing one is changed only where it
differs: run strategy, disk sizes, disks and interfaces added or left out (left-out disks are
detached, not deleted), link states; other fields are fixed at creation. Every document is
checked before anything changes, and either all changes are kept or none.

A kubevirt.io/v1 VirtualMachine (with the Secret and NetworkAttachmentDefinitions it uses) is
taken as an instance too, as the instance page's Export YAML writes it: its run strategy, CPU
topology, memory, firmware, disks, interfaces and cloud-init become the instance's fields, and a
field the console has no setting for is refused at its line.
"""


class HelpFormatter(DjangoHelpFormatter, RawDescriptionHelpFormatter):
    """Keeps the example manifest of the description as written."""


class Command(BaseCommand):
    help = HELP

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        return super().create_parser(prog_name, subcommand, formatter_class=HelpFormatter)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "-f", "--filename", action="append", required=True, metavar="FILE",
            help="A manifest, a folder of *.yaml and *.yml manifests, or - for standard input. "
            "Repeat to apply several together.",
        )  # fmt: skip
        parser.add_argument(
            "--user",
            default=os.environ.get(USER_VARIABLE) or None,
            help=f"The user who acts (needs the operator role); default: ${USER_VARIABLE}.",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Print the diff and check every change, but change nothing.",
        )

    def handle(self, *args: object, **options: Any) -> None:
        actor = _user(options["user"])
        sources = [source for name in options["filename"] for source in _sources(name)]
        dry_run = bool(options["dry_run"])
        try:
            plans = manifest_apply(sources=sources, actor=actor, dry_run=dry_run)
        except ManifestInvalid as invalid:
            for problem in invalid.problems:
                self.stderr.write(str(problem))
            count = len(invalid.problems)
            raise CommandError(
                f"Nothing was applied: {count} problem{'s' if count > 1 else ''}."
            ) from None
        for plan in plans:
            for line in plan.diff():
                self.stdout.write(line)
        verbs = Counter(plan.verb for plan in plans)
        if dry_run:
            self.stdout.write(
                f"Dry run, nothing changed: {verbs['create']} to create, {verbs['change']} to "
                f"change, {verbs['unchanged']} unchanged."
            )
        else:
            self.stdout.write(
                f"Applied: {verbs['create']} created, {verbs['change']} changed, "
                f"{verbs['unchanged']} unchanged."
            )


def _user(username: str | None) -> AbstractBaseUser:
    if not username:
        raise CommandError(f"Name the acting user with --user or ${USER_VARIABLE}.")
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise CommandError(f"No user named {username}.")
    if not user.is_active:
        raise CommandError(f"The user {username} is inactive.")
    return user


def _sources(name: str) -> list[tuple[str, str]]:
    """(name, text) of each manifest `-f` names."""
    if name == "-":
        return [("<stdin>", sys.stdin.read())]
    path = Path(name)
    files = (
        sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml"))
        if path.is_dir()
        else [path]
    )
    sources = []
    for file in files:
        try:
            sources.append((str(file), file.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise CommandError(f"{file}: no such file.") from None
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(f"{file}: cannot be read: {error}") from None
    if not sources:
        raise CommandError(f"{name}: no *.yaml or *.yml files in this folder.")
    return sources
