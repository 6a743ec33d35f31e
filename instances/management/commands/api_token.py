"""Create API tokens: `manage.py api_token create USERNAME NAME` prints the token once."""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from instances.services.tokens import api_token_create


class Command(BaseCommand):
    help = "Manage API tokens for the JSON API."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser(
            "create", help="Create a token and print it (only the token goes to stdout)."
        )
        create.add_argument("username")
        create.add_argument("name", help="What the token is for, e.g. ci-deploys.")
        create.add_argument(
            "--expires-in-days", type=int, default=None, help="Default: the token never expires."
        )

    def handle(self, *args: object, **options: object) -> None:
        # Only one action so far; the subcommand keeps room for list and revoke.
        username = str(options["username"])
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username}.")
        days = options["expires_in_days"]
        expires_at = timezone.now() + timedelta(days=days) if isinstance(days, int) else None
        try:
            token, plaintext = api_token_create(
                user=user, name=str(options["name"]), expires_at=expires_at
            )
        except ValidationError as error:
            raise CommandError(
                " ".join(f"{field}: {' '.join(msgs)}" for field, msgs in error.message_dict.items())
            ) from None
        self.stderr.write(
            f"Created API token {token.name!r} ({token.prefix}…) for {username}. "
            "Copy it now: it is not shown again."
        )
        self.stdout.write(plaintext)
