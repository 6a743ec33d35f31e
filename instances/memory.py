"""Keeping long-running processes free of collector pauses.

A web, worker or console proxy process holds a few hundred thousand objects once Django, Celery
and the apps are loaded, and they live as long as the process. Python's full garbage collection
walks all of them: on a small machine that pauses every thread of the process for 50 to 150 ms at
a random moment, in the middle of a request, a power operation or a console's traffic.
"""

import gc


def freeze_startup_objects() -> None:
    """Move what exists now (modules, settings, registries) out of the collector's reach, so a
    full collection walks only what requests and tasks made since. Call once a process has
    loaded what it serves; objects made afterwards are collected as before."""
    gc.collect()
    gc.freeze()
