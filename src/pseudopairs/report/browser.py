"""Look at a Snakemake report the way a reader does: headless Chromium, driven over the DevTools
protocol on a pipe (``--remote-debugging-pipe``; no network port, no extra package). It opens
the report, clicks a result's view button, reads the DOM of the page shown in the report's
frame and takes a screenshot. Used by tests/test_report.py and benchmarks/report_screenshot.py;
needs Debian's ``chromium`` (``apt-get install -y chromium``).
"""

from __future__ import annotations

import base64
import json
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
         "--hide-scrollbars", "--mute-audio"]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    """One headless Chromium, one page: ``call(method, **params)`` sends a DevTools command to
    the page and returns its result."""

    def __init__(self, *, width: int = 1400, height: int = 1000, timeout: float = 60.0):
        exe = find_chromium()
        if exe is None:
            raise RuntimeError("headless Chromium not found: apt-get install -y chromium")
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="pseudopairs-chromium-")
        args = [*FLAGS, "--remote-debugging-pipe", f"--user-data-dir={self._profile.name}",
                f"--window-size={width},{height}", "about:blank"]
        # The protocol pipe is fd 3 (commands in) and fd 4 (replies out): our stdin and stdout.
        self._proc = subprocess.Popen(["sh", "-c", 'exec "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null', exe, *args],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._messages: queue.Queue = queue.Queue()
        self._events: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()
        self._next_id = 0
        self.session = None
        target = next(t for t in self.call("Target.getTargets", session=False)["targetInfos"] if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=target["targetId"], flatten=True,
                                 session=False)["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)
        self.call("Page.enable")

    def _read(self) -> None:
        buffer = b""
        while True:
            chunk = self._proc.stdout.read1(65536)
            if not chunk:
                self._messages.put(None)
                return
            buffer += chunk
            while b"\0" in buffer:
                message, buffer = buffer.split(b"\0", 1)
                self._messages.put(json.loads(message))

    def _receive(self, deadline: float) -> dict:
        try:
            message = self._messages.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError("Chromium did not answer in time") from None
        if message is None:
            raise RuntimeError("Chromium exited")
        return message

    def call(self, method: str, *, session: bool = True, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session and self.session:
            message["sessionId"] = self.session
        self._proc.stdin.write(json.dumps(message).encode("utf-8") + b"\0")
        self._proc.stdin.flush()
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            self._events.append(reply)

    def wait_event(self, method: str, timeout: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            for k, event in enumerate(self._events):
                if event.get("method") == method:
                    return self._events.pop(k)
            self._events.append(self._receive(deadline))

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str, timeout: float | None = None):
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(f"the page never showed {what}")

    def open(self, url: str) -> None:
        self._events.clear()
        self.call("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        Path(path).write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.call("Browser.close", session=False)
        except (RuntimeError, TimeoutError, BrokenPipeError):
            pass
        try:
            self._proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._profile.cleanup()

    def __enter__(self) -> Chromium:  # noqa: PYI034
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --------------------------------------------------------------------------------------------
# The report


@dataclass
class ReportView:
    """What the reader sees: the report's result categories and the page shown in its frame."""

    categories: set[str] = field(default_factory=set)
    menu_text: str = ""
    frame_text: str = ""
    frame_tables: int = 0
    frame_images: int = 0
    frame_width: int = 0
    results: list[str] = field(default_factory=list)


def _walk(node: dict):
    """Every node under ``node`` (into frames), but not the text of styles and scripts."""
    yield node
    if node.get("nodeName") in ("STYLE", "SCRIPT", "HEAD"):
        return
    for child in node.get("children", []):
        yield from _walk(child)
    if "contentDocument" in node:
        yield from _walk(node["contentDocument"])


def frame_contents(document: dict) -> tuple[str, int, int]:
    """(text, <table>s, <img>s) of the documents inside the page's iframes."""
    texts, tables, images = [], 0, 0
    for node in _walk(document):
        if node.get("nodeName") == "IFRAME" and "contentDocument" in node:
            for inner in _walk(node["contentDocument"]):
                name = inner.get("nodeName")
                tables += name == "TABLE"
                images += name == "IMG"
                if name == "#text":
                    texts.append(inner.get("nodeValue", ""))
    return " ".join(t.strip() for t in texts if t.strip()), tables, images


CLICK_VIEW = """(() => {
  const rows = [...document.querySelectorAll('tr')].filter(
    r => r.querySelector('td') && r.querySelector('td').innerText.trim() === %s);
  const button = rows.length ? rows[0].querySelector('a') : null;
  if (button) { button.click(); }
  return Boolean(button);
})()"""

# the first cell of every row of the result list shown (a result's first label, or its path)
LISTED = "[...document.querySelectorAll('tr')].map(r => r.querySelector('td')).filter(Boolean).map(c => c.innerText.trim())"


def view_report(report: Path, result: str | None = None, *, screenshot: Path | None = None,
                width: int = 1400, height: int = 1000, category: str = "Tables",
                subcategory: str | None = None) -> ReportView:
    """Open ``report`` (snakemake --report), and with ``result`` (as the report lists it: its
    first label, e.g. "Table 5", or its path where it has no labels) open ``category`` (and
    ``subcategory``) and click that result's view button, as a reader would; read what the frame
    shows and save a screenshot of the window."""
    with Chromium(width=width, height=height) as browser:
        browser.open(Path(report).resolve().as_uri())
        browser.wait_for("typeof categories !== 'undefined' && document.querySelector('#app nav, #app ul') "
                         "&& document.querySelector('#app').innerText.length > 0", "the report's menu")
        view = ReportView(categories=set(browser.evaluate("Object.keys(categories)")))
        if result is not None:
            if subcategory is None:
                browser.evaluate(f"app.showCategory({json.dumps(category)})")
            else:
                browser.evaluate(f"app.setView({{navbarMode: 'subcategory', category: {json.dumps(category)}, "
                                 f"subcategory: {json.dumps(subcategory)}}})")
            time.sleep(0.3)
            view.results = browser.evaluate(LISTED) or []
            browser.wait_for(CLICK_VIEW % json.dumps(result), f"{result} in the {category} list")
            browser.wait_for("(() => { const f = document.querySelector('iframe'); return f && f.contentWindow "
                             "&& f.src.startsWith('data:text/html'); })()", "the result's frame")
            # the frame's page is parsed when what it holds stops changing
            deadline, last = time.monotonic() + browser.timeout, None
            while time.monotonic() < deadline:
                document = browser.call("DOM.getDocument", depth=-1, pierce=True)["root"]
                contents = frame_contents(document)
                if contents[0] and contents == last:
                    break
                last = contents
                time.sleep(0.5)
            view.frame_text, view.frame_tables, view.frame_images = last or ("", 0, 0)
            view.frame_width = browser.evaluate("document.querySelector('iframe').clientWidth")
            time.sleep(0.5)  # let the frame paint its images
        view.menu_text = browser.evaluate("document.querySelector('#app').innerText")
        if screenshot is not None:
            browser.screenshot(screenshot)
    return view


def listed(report: Path, category: str = "Tables", subcategory: str | None = None) -> list[str]:
    """What the report lists in ``category`` (and ``subcategory``): the first cell of each row (a
    result's first label, or its path where it has none)."""
    with Chromium() as browser:
        browser.open(Path(report).resolve().as_uri())
        browser.wait_for("typeof categories !== 'undefined' && document.querySelector('#app').innerText.length > 0",
                         "the report's menu")
        if subcategory is None:
            browser.evaluate(f"app.showCategory({json.dumps(category)})")
        else:
            browser.evaluate(f"app.setView({{navbarMode: 'subcategory', category: {json.dumps(category)}, "
                             f"subcategory: {json.dumps(subcategory)}}})")
        return browser.wait_for(f"(() => {{ const l = {LISTED}; return l.length ? l : null; }})()", "the list")


def non_blank(png: Path, region: tuple[float, float, float, float] = (0.0, 0.0, 1.0, 1.0)) -> bool:
    """Whether the ``region`` (left, top, right, bottom as fractions) of a screenshot shows
    something: more than 1% of its pixels differ from its most common colour."""
    from PIL import Image

    with Image.open(png) as image:
        w, h = image.size
        box = (int(region[0] * w), int(region[1] * h), int(region[2] * w), int(region[3] * h))
        part = image.convert("RGB").crop(box)
    total = part.size[0] * part.size[1]
    if not total:
        return False
    colours = part.getcolors(maxcolors=total)  # (count, colour) of every colour
    return 1 - max(count for count, _ in colours) / total > 0.01


WIDER = """(() => {
  const width = document.documentElement.clientWidth;
  const wide = [...document.querySelectorAll('table, figure, img, section, p, div')].filter(
    e => e.getBoundingClientRect().right > width + 0.5 || e.scrollWidth > e.clientWidth + 1);
  return {width: width, scroll: document.documentElement.scrollWidth,
          wide: wide.map(e => e.tagName + (e.className ? '.' + e.className : '') + ' ' +
                         Math.round(e.getBoundingClientRect().width))};
})()"""


def overflow(page: Path, width: int, height: int = 1000) -> dict:
    """Open an HTML page alone in a window ``width`` pixels wide (the report's frame: see
    :attr:`ReportView.frame_width`) and list what is wider than the window or scrolls sideways:
    ``{"width", "scroll" (the page's scroll width), "wide": ["TABLE.results 1234", ...]}``."""
    with Chromium(width=width, height=height) as browser:
        browser.open(Path(page).resolve().as_uri())
        return browser.evaluate(WIDER)
