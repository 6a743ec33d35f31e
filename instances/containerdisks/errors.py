"""The one error a container disk pull raises: a message for the user, at a field."""


class ContainerDiskError(Exception):
    """`field` is the form field the message belongs at ("reference" or "credentials");
    `retryable` says whether pulling again later can help."""

    def __init__(self, message: str, *, field: str = "reference", retryable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.retryable = retryable
