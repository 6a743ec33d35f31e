"""Limits a long-running server raises for itself at start (the web server, the console proxy)."""

import resource


def allow_open_files(wanted: int) -> None:
    """Raise the soft limit on open files towards `wanted` (never past the hard limit): each
    client holds a socket, and at Debian's usual 1024 a flood of idle ones stops accept()."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        limit = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
