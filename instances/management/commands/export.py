"""`manage.py export --project P [KIND/NAME]`: a project, or one of its objects, as the
manifest `manage.py apply -f` takes back unchanged."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from instances.manifests import object_manifest, project_manifest
from instances.models import Project


class Command(BaseCommand):
    help = "Write a project, or one object of it (e.g. Instance/web-1), as YAML manifests."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="The project's slug.")
        parser.add_argument(
            "object", nargs="?", metavar="KIND/NAME", help="One object, e.g. Subnet/backend."
        )

    def handle(self, *args: object, **options: Any) -> None:
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"No project {options['project']}.")
        if not options["object"]:
            self.stdout.write(project_manifest(project, redact=False), ending="")
            return
        kind, _, name = str(options["object"]).partition("/")
        text = object_manifest(kind, project, name, redact=False)
        if text is None:
            raise CommandError(f"{project.slug} has no {kind} called {name}.")
        self.stdout.write(text, ending="")
