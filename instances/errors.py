class ActionRefused(Exception):
    """An action that is not allowed now (state, role or run strategy); says why, for the user."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
