"""`manage.py seed_sandbox [--endpoint URL] [--project SLUG]`: a clearly labelled "Sandbox AWS"
account pointing at the local moto server that `bin/zop run` starts, so the wizard works
offline end to end. Running it again updates the endpoint; nothing else changes."""

from django.core.management.base import BaseCommand, CommandParser

from instances.models import Project
from provisioning.models import CloudAccount
from provisioning.services.accounts import account_create

NAME = "Sandbox AWS"


class Command(BaseCommand):
    help = "Add the 'Sandbox AWS' cloud account (a local moto server) to a project."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--endpoint", default="http://127.0.0.1:5001")
        parser.add_argument("--project", default="demo", help="Project slug (default: demo).")

    def handle(self, *args: object, **options: str) -> None:
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            self.stderr.write(f"No project {options['project']!r}: run seed_demo first.")
            return
        existing = CloudAccount.objects.filter(project=project, name=NAME).first()
        if existing is not None:
            existing.endpoint_url = options["endpoint"]
            existing.save(update_fields=["endpoint_url", "updated_at"])
            account = existing
        else:
            account = account_create(
                project=project, actor=None, name=NAME, access_key_id="sandbox",
                secret_access_key="sandbox", endpoint_url=options["endpoint"], sandbox=True,
            )  # fmt: skip
        self.stdout.write(f"cloud account: {account.name} → {account.endpoint_url}")
