"""Logging filters the LOGGING setting names."""

import logging

from django.core.exceptions import PermissionDenied, SuspiciousOperation


class RefusalsWithoutTraceback(logging.Filter):
    """A 403 or a request refused as too large is an answer, not a fault: Django's warning
    keeps its one line (path and status) and loses the traceback it carries."""

    def filter(self, record: logging.LogRecord) -> bool:
        refused = PermissionDenied | SuspiciousOperation
        if record.exc_info and isinstance(record.exc_info[1], refused):
            record.exc_info = None
            record.exc_text = None
        return True
