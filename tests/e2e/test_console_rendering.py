"""How the serial console draws text, at a device pixel ratio of 1: the page in Chromium, the
console proxy in-process, and a fake serial socket printing the text."""

import base64

import pytest
from django.conf import settings
from playwright.sync_api import expect

from instances.consoles.proxy import ConsoleProxy
from tests.e2e.session import log_in
from tests.instances.consoles.conftest import (
    FakeBackend,
    LoopThread,
    _Locator,
    free_port,
    served,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

SCREENSHOTS = settings.RUN_DIR  # the proxy's recordings go to the test's own folder instead


@pytest.fixture
def serial_socket(tmp_path):
    """A fake serial socket behind a real console proxy that the live server's pages reach."""
    loop = LoopThread()
    backend = FakeBackend(tmp_path, loop, echo=False).start()
    yield backend
    backend.stop()
    loop.stop()


@pytest.fixture
def proxy_for_pages(serial_socket, live_server, settings, tmp_path):
    proxy = ConsoleProxy(
        allowed_origins=[live_server.url], locator=_Locator(serial_socket), linger=0
    )
    settings.CONSOLEPROXY_PORT = free_port()
    settings.RUN_DIR = tmp_path / "run"
    with served(proxy, serial_socket.loop, settings.CONSOLEPROXY_PORT):
        yield proxy


def lit_pixels_per_cell(browser, png: bytes, cells: int) -> list[list[int]]:
    """For each of `cells` equal cells across a one-row screenshot, how many pixels are lit
    in each of its pixel rows (top to bottom)."""
    decoder = browser.new_page()
    try:
        return decoder.evaluate(
            """async ([data, cells]) => {
                const blob = await (await fetch("data:image/png;base64," + data)).blob();
                const image = await createImageBitmap(blob);
                const canvas = new OffscreenCanvas(image.width, image.height);
                const context = canvas.getContext("2d");
                context.drawImage(image, 0, 0);
                const pixels = context.getImageData(0, 0, image.width, image.height).data;
                const width = image.width / cells;
                const lit = (x, y) => {
                    const i = (y * image.width + x) * 4;
                    return pixels[i] + pixels[i + 1] + pixels[i + 2] > 3 * 100;
                };
                return Array.from({ length: cells }, (_, cell) =>
                    Array.from({ length: image.height }, (_, y) => {
                        let count = 0;
                        for (let x = Math.ceil(cell * width); x < Math.floor((cell + 1) * width); x += 1) count += lit(x, y);
                        return count;
                    }));
            }""",
            [base64.b64encode(png).decode(), cells],
        )
    finally:
        decoder.close()


def test_the_serial_console_draws_underscores_at_a_device_pixel_ratio_of_one(
    browser, live_server, proxy_for_pages, serial_socket, running, operator
):
    context = browser.new_context(
        base_url=live_server.url, viewport={"width": 1280, "height": 900}, device_scale_factor=1
    )
    context.set_default_timeout(20_000)
    page = context.new_page()
    log_in(page, "operator")
    page.goto(f"/projects/alpha/instances/{running.pk}/console/serial/")
    expect(page.get_by_test_id("console-status")).to_have_text("Connected")

    serial_socket.emit("serial", b"x86_64 a_b\r\n")
    page.wait_for_function("() => window.zopConsole.text().startsWith('x86_64 a_b')")
    page.evaluate("new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    cols, rows = page.evaluate("[window.zopConsole.term.cols, window.zopConsole.term.rows]")
    box = page.locator("#terminal .xterm-screen").bounding_box()
    cell_width, cell_height = box["width"] / cols, box["height"] / rows
    first_row = {"x": box["x"], "y": box["y"], "width": 12 * cell_width, "height": cell_height}
    png = page.screenshot(clip=first_row, path=str(SCREENSHOTS / "e2e-serial-underscores.png"))
    context.close()

    cells = lit_pixels_per_cell(browser, png, 12)
    lit = [sum(cell) for cell in cells]
    assert lit[6] == 0, f"the space is drawn: {lit}"
    for column in (3, 8):  # x86_64 a_b
        # a line along the bottom of the cell, most of its width wide
        assert max(cells[column]) >= cell_width / 2, (
            f"no underscore in cell {column}: {cells[column]}"
        )
        assert cells[column].index(max(cells[column])) > cell_height / 2, cells[column]


def test_the_terminal_stays_inside_its_black_box(page, login, project, running):
    page.set_viewport_size({"width": 1280, "height": 900})
    login("operator")
    page.goto(f"/projects/{project.slug}/instances/{running.pk}/console/serial/")
    page.wait_for_function("() => window.zopConsole && window.zopConsole.term.rows > 0")
    outside = page.evaluate(
        """() => {
            const box = document.getElementById("terminal");
            const padding = parseFloat(getComputedStyle(box).paddingBottom);
            const inner = box.getBoundingClientRect().bottom - padding;
            return box.querySelector(".xterm").getBoundingClientRect().bottom - inner;
        }"""
    )
    assert outside <= 0, f"the terminal sticks out {outside}px below its box"
