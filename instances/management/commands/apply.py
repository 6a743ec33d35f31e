"""`manage.py apply -f manifest.yaml --user USERNAME [--dry-run] [--prune [--force]]`: make a
project's objects match their manifests, through the services (instances.manifests works)."""

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
Create or update a project's objects from YAML manifests: subnets, SSH keys, images (from a
URL), disks, instances, Elastic IPs and provisioning jobs (kind: Subnet, SSHKey, Image, Disk,
Instance, ElasticIP, ProvisioningJob). `manage.py export` writes them, and a project page's
Export YAML too; applying an export changes nothing.

Each document (documents are separated by ---) declares one object; on the demo install:

  kind: Instance
  project: demo
  name: web-1
  spec:
    zone: local-1a
    root_image: ZopDay demo guest   # images, subnets and SSH keys by name or id
    root_size_gb: 1
    disks:
      - {name: web-1-data, size_gb: 2}
    nics:
      - {subnet: default}           # eth0
      - {subnet: default, model: e1000}

spec takes the fields of the API's body of that kind (for an instance InstanceIn, DiskIn,
NicIn) with the API's messages, and refuses fields it does not know; a problem names the line
of its field. An Elastic IP's nic is instance/eth0.

An interface also takes link (up or down) and confirm_primary. A missing object is created.
An existing instance is changed only where it differs: run strategy, disk sizes, disks and
interfaces added or left out (left-out disks are detached, not deleted), link states; other
fields are fixed at creation. Every document is checked, and either all changes are kept or
none.

With --prune, the objects apply made (or took over) in the manifests' projects that no
document declares any more are deleted, after the rest; the dry run lists them first. A
running instance is refused unless --force. What the console or the API made is never pruned.

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
        parser.add_argument(
            "--prune", action="store_true",
            help="Also delete what apply made in these projects that no document declares now.",
        )  # fmt: skip
        parser.add_argument(
            "--force", action="store_true", help="With --prune: delete running instances too."
        )
        parser.add_argument(
            "--project", action="append", default=[], metavar="SLUG",
            help="With --prune: a project to prune even if no document names it any more.",
        )  # fmt: skip

    def handle(self, *args: object, **options: Any) -> None:
        actor = _user(options["user"])
        sources = [source for name in options["filename"] for source in _sources(name)]
        dry_run = bool(options["dry_run"])
        try:
            plans = manifest_apply(
                sources=sources, actor=actor, dry_run=dry_run, prune=bool(options["prune"]),
                force=bool(options["force"]), projects=tuple(options["project"]),
            )  # fmt: skip
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
            pruned = f", {verbs['delete']} to delete" if options["prune"] else ""
            self.stdout.write(
                f"Dry run, nothing changed: {verbs['create']} to create, {verbs['change']} to "
                f"change{pruned}, {verbs['unchanged']} unchanged."
            )
        else:
            pruned = f", {verbs['delete']} deleted" if options["prune"] else ""
            self.stdout.write(
                f"Applied: {verbs['create']} created, {verbs['change']} changed{pruned}, "
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
