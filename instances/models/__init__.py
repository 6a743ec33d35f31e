from .audit import AuditEvent
from .projects import Membership, Project

__all__ = ["AuditEvent", "Membership", "Project"]
