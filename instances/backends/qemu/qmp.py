"""A small synchronous client for QEMU's monitor (QMP), over the asyncio `qemu.qmp` library.

Each call opens a connection, runs its commands and closes it: QEMU serves one QMP client at a time
on a socket (callers take turns on a lock file), and a backend call must not hold the monitor
between calls (another worker may need it). Errors come back as BackendError: connection problems
and timeouts are retryable, a command QEMU refused is not.
"""

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Awaitable, Callable, Collection, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from qemu.qmp import ConnectError, ExecuteError, QMPClient, QMPError, Runstate
from qemu.qmp.qmp_client import NegotiationError

from instances.backends.base import BackendError

from .turns import socket_turn

T = TypeVar("T")
log = logging.getLogger(__name__)

HAND_OVER_SECONDS = 0.05  # time a woken caller gets to record the answer (see _hand_over)


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
        with socket_turn(self.socket_path, timeout=self.timeout, what="QEMU's monitor"):
            return _run_sync(self._execute_all(commands))

    def wait_for_status(
        self, states: Collection[str], events: Collection[str], timeout: float
    ) -> bool:
        """Wait until QEMU's run status is one of states: True once it is, else False.

        False on timeout or when QEMU closes the connection. Events are watched before query-status,
        so no change is missed; use a monitor that serves nothing else, as this holds it.
        """
        answer: concurrent.futures.Future[bool] = concurrent.futures.Future()

        def watch() -> None:
            try:
                with socket_turn(self.socket_path, timeout=self.timeout, what="QEMU's monitor"):
                    _run_sync(self._wait_for_status(states, events, timeout, answer))
            except BaseException as error:  # handed to the caller, who raises it
                if not answer.done():
                    answer.set_exception(error)
                else:
                    log.warning("closing %s after its answer: %s", self.socket_path, error)
            else:
                if not answer.done():  # the session ended before it could answer
                    answer.set_result(False)

        threading.Thread(target=watch, name=f"qmp-watch {self.socket_path}", daemon=True).start()
        # the turn, the session and its closing each have their own limit: this one is a backstop
        limit = 3 * self.timeout + timeout
        try:
            return answer.result(timeout=limit)
        except concurrent.futures.TimeoutError:
            raise BackendError(
                f"QEMU's monitor did not answer within {limit:g} s.", retryable=True
            ) from None

    async def _wait_for_status(
        self,
        states: Collection[str],
        events: Collection[str],
        timeout: float,
        answer: concurrent.futures.Future[bool],
    ) -> None:
        async def work(client: QMPClient, step: _Step) -> None:
            with client.listener(events) as listener:
                step.command = "query-status"
                status = await client.execute("query-status")
                if isinstance(status, dict) and status.get("status") in states:
                    answer.set_result(True)
                    await _hand_over()
                    return
                step.command = f"a {'/'.join(sorted(events))} event"
                # QEMU exiting ends the connection without an event; so does a dropped client
                got = asyncio.ensure_future(listener.get())
                waits = {got, asyncio.ensure_future(_gone(client))}
                done, pending = await asyncio.wait(
                    waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                answer.set_result(got in done)
                for task in pending:
                    task.cancel()
            await _hand_over()

        await self._session(work, self.timeout + timeout)

    async def _execute_all(
        self, commands: Sequence[tuple[str, dict[str, Any] | None]]
    ) -> list[Any]:
        async def work(client: QMPClient, step: _Step) -> list[Any]:
            results = []
            for command, arguments in commands:
                step.command = command
                results.append(await client.execute(command, arguments))
            return results

        return await self._session(work, self.timeout)

    async def _session(
        self, work: Callable[[QMPClient, "_Step"], Awaitable[T]], budget: float
    ) -> T:
        """Connect, run work, disconnect; QMP's failures become BackendErrors naming the step."""
        client = QMPClient(f"zopday:{self.socket_path.parent.name}")
        step = _Step("connect")
        try:
            async with asyncio.timeout(budget):
                try:
                    await client.connect(str(self.socket_path))
                except ConnectError as error:
                    if not isinstance(error.exc, NegotiationError):
                        raise
                    # QEMU may emit an event (a guest's reset, say) between leaving negotiation
                    # and answering it, which qemu.qmp takes for a failed negotiation: again
                    client = QMPClient(f"zopday:{self.socket_path.parent.name}")
                    await client.connect(str(self.socket_path))
                return await work(client, step)
        except ExecuteError as error:
            raise CommandRefused(step.command, str(error), error.error_class) from error
        except TimeoutError as error:
            raise BackendError(
                f"QEMU's monitor did not answer {step.command} within {budget:g} s.",
                retryable=True,
            ) from error
        except (ConnectError, OSError) as error:
            raise BackendError(
                f"QEMU's monitor socket is not available ({_reason(error)}).", retryable=True
            ) from error
        except QMPError as error:
            raise BackendError(
                f"QEMU's monitor failed on {step.command}: {error}", retryable=True
            ) from error
        finally:
            # a closed connection (e.g. after "quit") resurfaces here: the command result counts
            with contextlib.suppress(QMPError, OSError, EOFError, TimeoutError):
                async with asyncio.timeout(self.timeout):
                    await client.disconnect()


@dataclasses.dataclass
class _Step:
    """What a session is doing, for its error messages."""

    command: str


async def _hand_over() -> None:
    """Let the caller, woken by the answer, act on it before this thread closes the session.

    Closing keeps this thread on the GIL for up to the switch interval (5 ms), delaying Stopped;
    blocking this event loop releases it."""
    await asyncio.sleep(HAND_OVER_SECONDS)


async def _gone(client: QMPClient) -> None:
    while client.runstate == Runstate.RUNNING:
        await client.runstate_changed()


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
