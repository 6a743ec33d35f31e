"""The console proxy process: a standalone websockets server beside the web server.

It bridges browser consoles (serial, VNC, exec) to the instances' console sockets; see
instances/consoles/proxy.py. `GET /healthz` answers "ok" for supervisors. Run one per hypervisor
host: on start it closes the session records a killed predecessor left open.
"""

import asyncio
import signal

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from instances.consoles.proxy import ConsoleProxy, run_forever
from instances.consoles.sessions import console_sessions_close_orphaned
from instances.memory import freeze_startup_objects
from instances.process_limits import allow_open_files


async def _serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    stop: asyncio.Future[None] = loop.create_future()

    def request_stop() -> None:
        if not stop.done():
            stop.set_result(None)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, request_stop)
    await run_forever(ConsoleProxy(), host, port, stop)


class Command(BaseCommand):
    help = "Run the console proxy (websockets) that bridges browser consoles to instances."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=settings.CONSOLEPROXY_HOST)
        parser.add_argument("--port", type=int, default=settings.CONSOLEPROXY_PORT)

    def handle(self, *args: object, host: str, port: int, **options: object) -> None:
        origins = ", ".join(settings.CONSOLEPROXY_ALLOWED_ORIGINS) or "none"
        if closed := console_sessions_close_orphaned(host=settings.ZOPDAY_HOST):
            self.stdout.write(f"Closed {closed} console session(s) left open by a previous proxy.")
        self.stdout.write(f"Console proxy listening on ws://{host}:{port}/ (origins: {origins})")
        freeze_startup_objects()
        allow_open_files(65536)  # a browser console is one socket; a flood of junk is many
        asyncio.run(_serve(host, port))
