"""The provisioning wizard's step list shows where the user is, to the eye as well as to a
screen reader."""

import pytest
from django.conf import settings
from playwright.sync_api import expect

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

LOOKS = """(item) => {
    const style = getComputedStyle(item);
    return [style.fontWeight, style.color, style.backgroundColor, style.borderBottomColor].join(" ");
}"""


def test_the_wizard_step_list_marks_the_current_step_visibly(wizard_second_step):
    page = wizard_second_step
    steps = page.locator(".wizard-steps li")
    current = page.locator(".wizard-steps [aria-current=step]")
    expect(current).to_have_text("Region and pool")
    expect(current).to_have_count(1)
    looks = [item.evaluate(LOOKS) for item in steps.all()]
    here = current.evaluate(LOOKS)
    assert looks.count(here) == 1, looks  # no other step looks like the current one
    page.locator(".wizard-steps").screenshot(path=str(settings.RUN_DIR / "e2e-wizard-steps.png"))
