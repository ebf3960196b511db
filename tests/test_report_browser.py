"""The HTML report driven in a real browser (Debian's Chromium through chromedriver), opened from file:// with the
network off: sorting, filtering, the charts, the links and the console. Planted defects show each check can fail."""
from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import unquote, urlparse

import pytest

from attnbench.report import html
from attnbench.report.render import render_report
from attnbench.report.rows import COLUMNS, display_value

DATA = Path(__file__).parent / "data"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="Chromium and its driver are not installed (apt-get install chromium chromium-driver)")


def recorded_runs() -> list[Path]:
    return sorted(p.parent for p in DATA.glob("*/results.jsonl"))


def largest_run() -> Path:
    return max(recorded_runs(), key=lambda run: sum(1 for line in open(run / "results.jsonl") if line.strip()))


def load(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in open(run / "results.jsonl") if line.strip()]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--proxy-server=127.0.0.1:9", "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path_factory.mktemp('profile')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    # the network off: any request the page makes beyond its own file fails (and shows as a console error)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions",
                           {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0})
    yield driver
    driver.quit()


def open_report(browser: Any, run: Path, out: Path) -> Path:
    render_report(run, out)
    page = out / "report.html"
    browser.get_log("browser")  # drop what an earlier page logged
    browser.get(page.as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    return page


def visible_rows(browser: Any) -> list[Any]:
    return browser.execute_script(
        "return Array.prototype.filter.call(document.getElementById('records').tBodies[0].rows,"
        " function (r) { return !r.hidden; })")


def column_index(key: str) -> int:
    return [k for k, _, _ in COLUMNS].index(key)


def check_sorting(browser: Any, records: list[dict[str, Any]]) -> None:
    i = column_index("time_ms")
    header = browser.find_elements("css selector", "#records thead th")[i]
    assert header.text == "median ms"
    timed = sorted(r["time_ms"] for r in records if r.get("time_ms") is not None)
    untimed = len(records) - len(timed)
    for direction, expected in (("asc", timed), ("desc", timed[::-1])):
        header.click()
        cells = browser.execute_script(
            f"return Array.prototype.map.call(document.getElementById('records').tBodies[0].rows,"
            f" function (r) {{ return r.cells[{i}].dataset.v; }})")
        values = [float(v) for v in cells if v != ""]
        assert values == pytest.approx(expected), f"sorted {direction} by median ms, the rows are out of order"
        assert cells[len(timed):] == [""] * untimed, f"sorted {direction}: rows without a time are not last"


def choose(browser: Any, key: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("css selector", f"select[data-filter='{key}']")).select_by_value(value)


def check_filters(browser: Any, records: list[dict[str, Any]]) -> None:
    by_backend = Counter(str(r["backend"]) for r in records)
    by_dtype = Counter(display_value(r, "dtype", None) for r in records)
    backend, n_backend = by_backend.most_common()[-1]  # the rarest: filtering visibly drops rows
    dtype, n_dtype = by_dtype.most_common()[-1]
    both = sum(1 for r in records if str(r["backend"]) == backend and display_value(r, "dtype", None) == dtype)
    for choice, expected in (((backend, ""), n_backend), (("", dtype), n_dtype), ((backend, dtype), both),
                             (("", ""), len(records))):
        choose(browser, "backend", choice[0])
        choose(browser, "dtype", choice[1])
        rows = visible_rows(browser)
        assert len(rows) == expected, f"filter backend={choice[0]!r} dtype={choice[1]!r}: {len(rows)} rows shown"
        assert int(browser.find_element("id", "shown").text) == expected
        if choice[0]:
            assert {row.get_attribute("data-backend") for row in rows} == {backend}


def check_charts_and_links(browser: Any, page: Path) -> None:
    images = browser.execute_script(
        "return Array.prototype.map.call(document.images, function (i) { return [i.complete, i.naturalWidth]; })")
    assert images, "the report shows no chart"
    assert all(complete and width > 0 for complete, width in images), f"a chart did not load: {images}"
    hrefs = browser.execute_script(
        "return Array.prototype.map.call(document.querySelectorAll('a[href]'), function (a) { return a.href; })")
    files = [h for h in hrefs if urlparse(h).scheme == "file" and not urlparse(h).fragment]
    assert len([h for h in files if h.endswith(".png")]) == len(images), "a chart has no link to its PNG"
    for href in files:
        target = Path(unquote(urlparse(href).path))
        assert target.is_file() and target.stat().st_size > 0, f"{href} does not resolve"
        assert target.resolve().is_relative_to(page.parent.resolve())
    for href in (h for h in files if h.endswith(".png")):  # and each linked PNG is an image the browser decodes
        width = browser.execute_async_script(
            "var done = arguments[1], img = new Image(); img.onload = function () { done(img.naturalWidth); };"
            " img.onerror = function () { done(0); }; img.src = arguments[0];", href)
        assert width > 0, f"{href} is not an image"


def check_console(browser: Any) -> None:
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert not errors, f"console errors: {errors}"


def check_report(browser: Any, run: Path, out: Path) -> None:
    page = open_report(browser, run, out)
    records = load(run)
    assert len(visible_rows(browser)) == len(records)
    check_charts_and_links(browser, page)
    check_console(browser)  # what loading the page logged
    check_sorting(browser, records)
    check_filters(browser, records)
    check_console(browser)


@pytest.mark.parametrize("run", sorted({DATA / "cpu-run", largest_run()}), ids=lambda p: p.name)
def test_report_sorts_filters_and_loads_offline(browser: Any, run: Path, tmp_path: Path) -> None:
    check_report(browser, run, tmp_path / "out")


PLANTED = {
    "sorting": ('* (dir === "asc" ? 1 : -1)', "* 1", "out of order"),
    "filtering": ("row.dataset[f.dataset.filter] === f.value", "row.dataset.backend === f.value", "rows shown"),
    "chart link": ('href="charts/{{ chart.name }}"', 'href="chart/{{ chart.name }}"', "does not resolve"),
    "chart image": ("base64,{{ chart.b64 }}", "base64,{{ chart.b64[:64] }}", "a chart did not load"),
    "script error": ("var filters =", "undefinedFunction(); var filters =", "console errors"),
}


@pytest.mark.parametrize("defect", PLANTED)
def test_a_planted_defect_fails_the_browser_check(browser: Any, defect: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    old, new, message = PLANTED[defect]
    assert old in html.TEMPLATE, f"the template no longer holds {old!r}: update the planted defect"
    monkeypatch.setattr(html, "TEMPLATE", html.TEMPLATE.replace(old, new))
    with pytest.raises(AssertionError, match=message):
        check_report(browser, largest_run(), tmp_path / "out")


def check_trace_links(browser: Any, run: Path) -> None:
    """Every record's --trace file is linked from its row, and every link opens a Chrome trace beside the page."""
    rows = browser.execute_script(
        "return Array.prototype.map.call(document.getElementById('records').tBodies[0].rows, function (r) {"
        " var a = r.querySelector('a.trace'); return a ? a.href : null; })")
    traced = [r for r in load(run) if r.get("trace")]
    assert traced and len([h for h in rows if h]) == len(traced), f"{len(traced)} traces, links: {rows}"
    for href in (h for h in rows if h):
        target = Path(unquote(urlparse(href).path))
        assert target.is_file(), f"{href} does not resolve"
        assert json.loads(target.read_text())["traceEvents"], f"{href} holds no trace"


@pytest.mark.parametrize("defect", [None, "absolute link"])
def test_every_trace_link_resolves_after_the_run_folder_moves(browser: Any, tmp_path: Path, defect: str | None,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The report written beside its results (as `attnbench run --trace` does), then the folder moved: each link is
    relative, so it still opens its trace; a link written as an absolute path would point at the old place."""
    from attnbench.report import render

    run = Path(shutil.copytree(DATA / "trace-run", tmp_path / "run"))
    if defect:
        monkeypatch.setattr(render, "trace_links", lambda records, run_dir, out: {
            id(r): (run_dir / r["trace"]).as_uri() for r in records if r.get("trace")})
    render_report(run)
    moved = run.rename(tmp_path / "moved")
    page = moved / "report.html"
    browser.get_log("browser")
    browser.get(page.as_uri())
    if defect:
        with pytest.raises(AssertionError, match="does not resolve"):
            check_trace_links(browser, moved)
        return
    check_trace_links(browser, moved)
    check_charts_and_links(browser, page)
    check_console(browser)
