"""Browser tests: Playwright driving Debian's Chromium against pytest-django's live server."""

import os
import shutil
import socket

import pytest

from provisioning.services.accounts import account_create
from tests.e2e.session import log_in, watch_csp
from tests.services import start_console_proxy, stop

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Playwright's sync API runs an event loop in this thread; the ORM calls the tests make next to
# it are still plain synchronous calls.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="session")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )  # fmt: skip
        yield browser
        browser.close()


@pytest.fixture
def page(browser, live_server):
    """A browser page; the test fails if the page breaks the Content-Security-Policy."""
    context = browser.new_context(base_url=live_server.url)
    context.set_default_timeout(15_000)
    page = context.new_page()
    violations = watch_csp(page)
    yield page
    context.close()
    assert not violations, f"Content-Security-Policy violations: {violations}"


@pytest.fixture
def scriptless_page(browser, live_server, operator):
    """A page with JavaScript off, logged in as the operator."""
    context = browser.new_context(base_url=live_server.url, java_script_enabled=False)
    context.set_default_timeout(15_000)
    page = context.new_page()
    log_in(page, "operator")
    yield page
    context.close()


@pytest.fixture
def login(page):
    return lambda username: log_in(page, username)


@pytest.fixture
def wizard_second_step(page, login, project, operator):
    """The operator in the provisioning wizard at its second step, "Region and pool", with an
    account nothing reaches (the wizard needs one to offer)."""
    account_create(
        project=project, actor=None, name="Unused AWS", access_key_id="unused",
        secret_access_key="unused", endpoint_url="http://127.0.0.1:9", sandbox=True,
    )  # fmt: skip
    login("operator")
    page.goto(f"/projects/{project.slug}/provisioning/new/")
    page.fill("#id_name", "shop")
    page.press("#id_name", "Enter")
    return page


@pytest.fixture
def console_proxy_port(celery_worker_process, live_server, settings, tmp_path):
    """`manage.py consoleproxy` for the live server's pages, on a free port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = start_console_proxy(port, [live_server.url], tmp_path / "consoleproxy.log")
    settings.CONSOLEPROXY_PORT = port  # what the pages tell the browser
    yield port
    stop(process)
