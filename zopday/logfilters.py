"""Logging filters the LOGGING setting names."""

import logging

from django.core.exceptions import PermissionDenied


class RefusalsWithoutTraceback(logging.Filter):
    """A 403 is an answer, not a fault: Django's "Forbidden (Permission denied)" warning keeps
    its one line (path and status) and loses the traceback it carries."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], PermissionDenied):
            record.exc_info = None
            record.exc_text = None
        return True
