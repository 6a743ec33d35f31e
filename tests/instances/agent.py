"""Waiting for a booted guest's agent, which starts a moment after the guest itself."""

import time

from instances.backends.base import Backend, BackendError, GuestFacts


def agent_facts(backend: Backend, machine_id: str, timeout: float = 60) -> GuestFacts:
    """The guest's facts once its agent answers (not yet running is retryable, and retried)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return backend.guest_facts(machine_id)
        except BackendError as error:
            if not error.retryable or time.monotonic() > deadline:
                raise
            time.sleep(0.25)
