import pytest

from instances.choices import Outcome, Role
from instances.models import AuditEvent, Membership
from instances.services import audit_record, membership_set, project_create

pytestmark = pytest.mark.django_db


def test_creating_a_project_leaves_an_audit_event_naming_the_actor(owner):
    project = project_create(slug="gamma", name="Gamma", actor=owner)
    event = AuditEvent.objects.get(project=project)
    assert (event.actor, event.actor_name, event.action) == (owner, "owner", "project.create")
    assert event.target_type == "project" and event.target_id == str(project.pk)


def test_membership_set_adds_then_changes_a_role(project, owner, django_user_model):
    user = django_user_model.objects.create_user("newcomer")
    membership_set(project=project, user=user, role=Role.VIEWER, actor=owner)
    membership_set(project=project, user=user, role=Role.OPERATOR, actor=owner)
    assert Membership.objects.get(project=project, user=user).role == Role.OPERATOR
    actions = list(AuditEvent.objects.filter(project=project).values_list("action", "detail__role"))
    assert ("membership.add", "viewer") in actions
    assert ("membership.change", "operator") in actions


def test_the_audit_trail_keeps_the_actor_name_after_the_user_is_deleted(project, owner):
    audit_record(actor=owner, action="x.y", project=project, outcome=Outcome.FAILURE, message="m")
    owner.delete()
    event = AuditEvent.objects.get(action="x.y")
    assert event.actor is None and event.actor_name == "owner"
    assert str(event) == "owner x.y"


def test_roles_are_ordered_viewer_operator_admin():
    assert Role.ADMIN.allows(Role.OPERATOR) and Role.OPERATOR.allows(Role.VIEWER)
    assert not Role.VIEWER.allows(Role.OPERATOR)
