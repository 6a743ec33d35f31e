"""supervisord for `bin/zop run`, but a log file it cannot write for a full disk is told in one
line a minute instead of a traceback for each line of output, which buried that output (still
shown on the terminal by scripts/supervisor_echo.py)."""

import errno
import sys
import time

from supervisor import loggers
from supervisor.supervisord import main

QUIET_SECONDS = 60.0
told_at = [float("-inf")]
handle_any_error = loggers.Handler.handleError


def handle_error(handler: loggers.Handler) -> None:
    error = sys.exc_info()[1]
    if not isinstance(error, OSError) or error.errno != errno.ENOSPC:
        return handle_any_error(handler)
    if time.monotonic() - told_at[0] < QUIET_SECONDS:
        return None
    told_at[0] = time.monotonic()
    where = getattr(handler, "baseFilename", "a log file")
    sys.stderr.write(
        f"supervisord: the disk is full: {where} and the other log files in the run folder are "
        "not written; the output goes on here. Free space on that disk.\n"
    )
    sys.stderr.flush()
    return None


if __name__ == "__main__":
    loggers.Handler.handleError = handle_error  # type: ignore[method-assign]
    sys.exit(main())
