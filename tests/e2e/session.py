"""Logging a browser page in, as a person does, through the login form; and watching it for
Content-Security-Policy violations, which Chromium reports on the page's console."""

from tests.factories import PASSWORD


def log_in(page, username: str) -> None:
    page.goto("/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login/" not in url)


# Chromium logs most violations itself; this catches the rest (a violation event of any kind).
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
  console.error(`Content Security Policy violation: ${event.violatedDirective} ${event.blockedURI}`);
});
"""


def watch_csp(page) -> list[str]:
    """Collect the page's CSP violations (page.csp_violations) from now on."""
    violations: list[str] = []
    page.add_init_script(REPORT_VIOLATIONS)
    page.on(
        "console",
        lambda message: (
            violations.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    page.csp_violations = violations
    return violations
