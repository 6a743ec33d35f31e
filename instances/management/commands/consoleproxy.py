"""The console proxy process: a standalone websockets server beside the web server.

Until browser consoles land it answers health checks and refuses console sessions with a clear
reason, so the run command supervises the same set of processes it will supervise later.
"""

import asyncio
import http
import signal

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response


def _health(connection: ServerConnection, request: Request) -> Response | None:
    if request.path == "/healthz":
        return connection.respond(http.HTTPStatus.OK, "ok\n")
    return None


async def _refuse(connection: ServerConnection) -> None:
    await connection.close(code=1013, reason="Browser consoles are not available yet.")


async def _serve(host: str, port: int) -> None:
    stop = asyncio.get_running_loop().create_future()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set_result, None)
    async with serve(_refuse, host, port, process_request=_health, compression=None):
        await stop


class Command(BaseCommand):
    help = "Run the console proxy (websockets) that bridges browser consoles to instances."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=settings.CONSOLEPROXY_HOST)
        parser.add_argument("--port", type=int, default=settings.CONSOLEPROXY_PORT)

    def handle(self, *args: object, host: str, port: int, **options: object) -> None:
        self.stdout.write(f"Console proxy listening on ws://{host}:{port}/")
        asyncio.run(_serve(host, port))
