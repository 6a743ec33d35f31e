"""Exec on a Sandbox AWS VM in a real browser: `manage.py consoleproxy` opens a Session Manager
session with the job's account at the Session Manager fake, whose agent runs a real shell."""

import re

import pytest
from django.conf import settings
from playwright.sync_api import expect

from instances.models import ConsoleSession
from tests.e2e.test_consoles import logged_in_page, terminal_text, type_line, wait_for_text
from tests.provisioning.vms import first_vm_of_landed_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture
def aws_vm(ssm_account, project, owner):
    """A landed job's first VM, as an instance (its agent online at the fake)."""
    return first_vm_of_landed_job(project, ssm_account, owner)


def test_exec_on_an_aws_vm_with_a_second_viewer_and_its_recording(
    browser, live_server, console_proxy_port, ssm, aws_vm, operator, owner
):
    first = logged_in_page(browser, live_server, "operator")
    first.goto(f"/projects/alpha/instances/{aws_vm.pk}/")
    first.click("[data-testid=options-menu] summary")
    first.click("[data-console=exec]")
    expect(first.get_by_test_id("console-status")).to_have_text("Connected")
    expect(first.get_by_test_id("keyboard-status")).to_have_text("You have the keyboard")
    wait_for_text(first, r"\$ ")
    type_line(first, "echo zop-$((6*7))")
    wait_for_text(first, r"(?m)^zop-42\s*$")

    second = logged_in_page(browser, live_server, "owner")
    second.goto(f"/projects/alpha/instances/{aws_vm.pk}/console/exec/")
    expect(second.get_by_test_id("console-status")).to_have_text("Connected")
    wait_for_text(second, r"(?m)^zop-42\s*$")  # the same session's output, from the history
    expect(second.get_by_test_id("keyboard-status")).to_have_text("operator has the keyboard")
    type_line(second, "echo blocked-$((1+1))")
    type_line(first, "echo after-$((2+2))")  # keystrokes are in order: once this shows...
    wait_for_text(second, r"(?m)^after-4\s*$")
    assert "blocked-2" not in terminal_text(first) + terminal_text(second)  # ...that never came
    assert len(ssm.sessions) == 1  # two viewers, one Session Manager session

    second.click("[data-testid=take-over]")
    expect(second.get_by_test_id("keyboard-status")).to_have_text("You have the keyboard")
    type_line(second, "echo taken-$((2*3))")
    wait_for_text(first, r"(?m)^taken-6\s*$")
    second.click("[data-testid=end-session]")
    expect(first.get_by_test_id("console-status")).to_have_text(re.compile("Session ended"))
    expect(first.get_by_test_id("new-session")).to_be_visible()
    (session_id,) = ssm.sessions
    assert session_id in ssm.terminated
    first.screenshot(path=str(settings.RUN_DIR / "e2e-ssm-exec.png"))
    assert first.csp_violations == second.csp_violations == []

    # the operator's recording replays what was typed and answered
    recorded = ConsoleSession.objects.filter(username="operator", kind="exec").get()
    second.goto(f"/projects/alpha/instances/{aws_vm.pk}/console-sessions/{recorded.pk}/replay/")
    expect(second.get_by_test_id("replay-status")).to_have_text("Finished", timeout=30_000)
    replayed = second.evaluate(
        "(() => { const b = window.zopReplay.term.buffer.active; const lines = [];"
        " for (let i = 0; i < b.length; i++) lines.push(b.getLine(i).translateToString(true));"
        " return lines.join('\\n'); })()"
    )
    assert re.search(r"(?m)^zop-42\s*$", replayed) and "taken-6" in replayed
    first.context.close()
    second.context.close()
