"""Drive ``slabscope web`` in a real browser: headless Chromium through Selenium and chromedriver (Debian's
``chromium`` and ``chromium-driver``, installed by .ci/bootstrap as root on Debian), on 127.0.0.1 only.

``WebDashboard`` starts the server on a free loopback port, opens the page with a hook that keeps the terminal
output the page receives (textual-serve streams the terminal's bytes over a websocket; the terminal itself draws on
a canvas), and gives the text the page was sent (escape sequences removed), keys typed into the page's terminal and
PNG screenshots. Used by tests/tui/test_web_browser.py and by tests/tui/export_screens.py --guide.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
ESCAPES = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][A-Z0-9]|\x1b[=>78]")
HOOK = """
window.__slabscope_term = "";
const slabscopeDecoder = new TextDecoder("utf-8");
const NativeWebSocket = window.WebSocket;
window.WebSocket = function (url, protocols) {
  const ws = protocols === undefined ? new NativeWebSocket(url) : new NativeWebSocket(url, protocols);
  ws.addEventListener("message", (event) => {
    if (typeof event.data !== "string") {
      window.__slabscope_term += slabscopeDecoder.decode(new Uint8Array(event.data), {stream: true});
    }
  });
  return ws;
};
window.WebSocket.prototype = NativeWebSocket.prototype;
"""


def missing_browser() -> str | None:
    """Why no browser can be driven here (None: Chromium, chromedriver and Selenium are all installed)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the dev extra installs it: make test does)"
    if not any(shutil.which(name) for name in CHROMIUM) or not shutil.which("chromedriver"):
        return ("no chromium + chromedriver here (.ci/bootstrap installs Debian's chromium and chromium-driver when "
                "run as root on Debian)")
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebDashboard:
    """One ``slabscope web`` server and one headless browser page on it. Owns both; ``close`` ends both."""

    def __init__(self, args: list[str], size: tuple[int, int] = (1400, 900)) -> None:
        self.port = free_port()
        cmd = [sys.executable, "-m", "app", "web", "--host", "127.0.0.1", "--port", str(self.port), *args]
        self.server = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       start_new_session=True)
        self.driver = None
        self._wait_listening()
        self.driver = self._browser(size)
        self.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": HOOK})
        self.driver.get(f"http://127.0.0.1:{self.port}/")

    def _wait_listening(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.server.poll() is not None:
                raise AssertionError(f"slabscope web exited: {self.server.stdout.read()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"slabscope web not listening on 127.0.0.1:{self.port} after {timeout:.0f} s")

    @staticmethod
    def _browser(size: tuple[int, int]):
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service

        options = Options()
        binary = next(shutil.which(name) for name in CHROMIUM if shutil.which(name))
        options.binary_location = binary
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    f"--window-size={size[0]},{size[1]}"):
            options.add_argument(arg)
        return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)

    def text(self) -> str:
        """Everything the page's terminal was sent so far, escape sequences removed."""
        return ESCAPES.sub("", self.driver.execute_script("return window.__slabscope_term || ''"))

    def wait_text(self, needle: str, since: int = 0, timeout: float = 60.0) -> int:
        """Wait until ``needle`` arrives after character ``since`` of ``text()``; returns the text's length."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            if needle in text[since:]:
                return len(text)
            time.sleep(0.1)
        raise AssertionError(f"{needle!r} not drawn in the browser within {timeout:.0f} s:\n{self.text()[-1500:]}")

    def press(self, keys: str) -> None:
        """Type ``keys`` into the page's terminal."""
        from selenium.webdriver.common.by import By

        self.driver.find_element(By.CSS_SELECTOR, ".xterm-helper-textarea").send_keys(keys)

    def screenshot(self) -> bytes:
        return self.driver.get_screenshot_as_png()

    def close(self) -> str:
        """End the browser and the server (its whole process group: the dashboards it started); its output."""
        if self.driver is not None:
            self.driver.quit()
        if self.server.poll() is None:
            os.killpg(self.server.pid, signal.SIGTERM)
            try:
                self.server.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.server.pid, signal.SIGKILL)
                self.server.wait(5)
        return self.server.stdout.read()
