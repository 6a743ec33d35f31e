"""Print how many QEMU guests of this run folder are running: `bin/zop run` says it as it stops."""

from django.conf import settings
from django.core.management.base import BaseCommand

from instances.backends.qemu.process import is_alive
from instances.backends.qemu.run_folder import RunFolder


def running_guests() -> int:
    """Machine folders whose pid file names a live QEMU of that folder (the backend's own test)."""
    root = settings.ZOPDAY_MACHINES_DIR
    if not root.is_dir():
        return 0
    runs = [RunFolder(path) for path in root.iterdir() if path.is_dir()]
    return sum(is_alive(run.read_pid(), str(run.qmp_socket)) for run in runs)


class Command(BaseCommand):
    help = "Print how many QEMU guests of this run folder are running."

    def handle(self, *args: object, **options: object) -> None:
        self.stdout.write(str(running_guests()))
