"""Writes of the instances app, one module per subject. Views, tasks, the API, the admin and
management commands all call these."""

from instances.services.audit import audit_record
from instances.services.projects import membership_set, project_create

__all__ = ["audit_record", "membership_set", "project_create"]
