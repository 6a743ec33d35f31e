"""The QEMU compute backend (see backend.py); QEMU-specific imports stay inside this package."""

from .backend import QemuBackend

__all__ = ["QemuBackend"]
