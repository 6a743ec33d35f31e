"""The one error type every cloud raises, and the decorator that maps an SDK's errors to it."""

from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import wraps
from typing import Any, TypeVar


class CloudError(Exception):
    """A cloud refused or failed: `message` is the cloud's own reason, shown to the user;
    `retryable` says whether trying again can help (throttling, a resource still settling)."""

    def __init__(self, message: str, *, retryable: bool = False, code: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.code = code


F = TypeVar("F", bound=Callable[..., Any])


def mapped_with(errors: Callable[[], AbstractContextManager[None]]) -> Callable[[F], F]:
    """A decorator that runs a cloud's method inside `errors` (its SDK's mapped_errors), so
    that what the SDK raises reaches the pipeline as CloudError."""

    def decorate(method: F) -> F:
        @wraps(method)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with errors():
                return method(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
