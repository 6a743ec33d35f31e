"""A small synchronous client for QEMU's monitor (QMP), over the asyncio `qemu.qmp` library.

Each call opens a connection, runs its commands and closes it: QEMU serves one QMP client at a time
on a socket, and a backend call must not hold the monitor between calls (another worker may need
it). Errors come back as BackendError: connection problems and timeouts are retryable, a command
QEMU refused is not.
"""

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from qemu.qmp import ConnectError, ExecuteError, QMPClient, QMPError

from instances.backends.base import BackendError

T = TypeVar("T")


class CommandRefused(BackendError):
    """QEMU answered a command with an error; `error_class` is QMP's (e.g. "DeviceNotFound")."""

    def __init__(self, command: str, description: str, error_class: str) -> None:
        super().__init__(f"QEMU refused {command}: {description}")
        self.error_class = error_class


class Monitor:
    """The QMP socket of one machine."""

    def __init__(self, socket_path: Path, *, timeout: float = 10.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def execute(self, command: str, arguments: dict[str, Any] | None = None) -> Any:
        return self.execute_all([(command, arguments)])[0]

    def execute_all(self, commands: Sequence[tuple[str, dict[str, Any] | None]]) -> list[Any]:
        """Run commands in order on one connection; the first refusal stops the rest."""
        return _run_sync(self._execute_all(commands))

    async def _execute_all(
        self, commands: Sequence[tuple[str, dict[str, Any] | None]]
    ) -> list[Any]:
        client = QMPClient(f"zopday:{self.socket_path.parent.name}")
        current = "connect"
        try:
            async with asyncio.timeout(self.timeout):
                await client.connect(str(self.socket_path))
                results = []
                for current, arguments in commands:
                    results.append(await client.execute(current, arguments))
                return results
        except ExecuteError as error:
            raise CommandRefused(current, str(error), error.error_class) from error
        except TimeoutError as error:
            raise BackendError(
                f"QEMU's monitor did not answer {current} within {self.timeout:g} s.",
                retryable=True,
            ) from error
        except (ConnectError, OSError) as error:
            raise BackendError(
                f"QEMU's monitor socket is not available ({_reason(error)}).", retryable=True
            ) from error
        except QMPError as error:
            raise BackendError(
                f"QEMU's monitor failed on {current}: {error}", retryable=True
            ) from error
        finally:
            # a closed connection (e.g. after "quit") resurfaces here: the command result counts
            with contextlib.suppress(QMPError, OSError, EOFError):
                await client.disconnect()


def _reason(error: BaseException) -> str:
    cause = error.exc if isinstance(error, ConnectError) else error
    return getattr(cause, "strerror", None) or str(cause)


def _run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, also from a thread that already runs an event loop (then in a helper thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
