"""The HTML report driven in a real browser (Debian's Chromium through chromedriver), opened from file:// with the
network off: sorting, filtering, the charts, the links and the console. Planted defects show each check can fail."""
from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest

from attnbench.report import html, render
from attnbench.report.render import build_charts, render_report
from attnbench.report.rows import COLUMNS, display_value
from tests.helpers import loaded

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
    """The rows drawn: one page of the records that pass the filters."""
    return browser.execute_script(
        "return Array.prototype.filter.call(document.getElementById('records').tBodies[0].rows,"
        " function (r) { return !r.hidden; })")


# A row's value under column i: its numeric cell's data-v ('' where the cell is empty or spanned by the reason of a
# record that measured nothing), else its text.
CELL_AT = """function cellAt(row, i) { var at = 0;
  for (var c = 0; c < row.cells.length; c++) { var cell = row.cells[c];
    if (i < at + cell.colSpan)
      return cell.classList.contains('why') ? '' : (cell.dataset.v !== undefined ? cell.dataset.v : cell.textContent);
    at += cell.colSpan; } return ''; }"""


def page_values(browser: Any, i: int) -> list[str]:
    return browser.execute_script(CELL_AT + f"; return Array.prototype.map.call("
                                  f"document.getElementById('records').tBodies[0].rows, "
                                  f"function (r) {{ return cellAt(r, {i}); }})")


def every_page(browser: Any, read: Any) -> list[Any]:
    """What `read` returns on each page, first to last, concatenated (the table is left on its first page)."""
    while not browser.find_element("id", "page-prev").get_property("disabled"):
        browser.find_element("id", "page-prev").click()
    found = list(read())
    while not browser.find_element("id", "page-next").get_property("disabled"):
        browser.find_element("id", "page-next").click()
        found += read()
    while not browser.find_element("id", "page-prev").get_property("disabled"):
        browser.find_element("id", "page-prev").click()
    return found


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
        cells = every_page(browser, lambda: page_values(browser, i))
        values = [float(v) for v in cells if v != ""]
        assert values == pytest.approx(expected), f"sorted {direction} by median ms, the rows are out of order"
        assert cells[len(timed):] == [""] * untimed, f"sorted {direction}: rows without a time are not last"


def choose(browser: Any, key: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("css selector", f"select[data-filter='{key}']")).select_by_value(value)


def check_filters(browser: Any, records: list[dict[str, Any]]) -> None:
    typed = loaded(records)
    by_backend = Counter(r.backend for r in typed)
    by_dtype = Counter(display_value(r, "dtype", None) for r in typed)
    backend, n_backend = by_backend.most_common()[-1]  # the rarest: filtering visibly drops rows
    dtype, n_dtype = by_dtype.most_common()[-1]
    both = sum(1 for r in typed if r.backend == backend and display_value(r, "dtype", None) == dtype)
    for choice, expected in (((backend, ""), n_backend), (("", dtype), n_dtype), ((backend, dtype), both),
                             (("", ""), len(records))):
        choose(browser, "backend", choice[0])
        choose(browser, "dtype", choice[1])
        backends = every_page(browser, lambda: [row.get_attribute("data-backend") for row in visible_rows(browser)])
        assert len(backends) == expected, \
            f"filter backend={choice[0]!r} dtype={choice[1]!r}: {len(backends)} rows shown"
        assert int(browser.find_element("id", "shown").text) == expected
        if choice[0]:
            assert set(backends) == {backend}


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
    assert len(visible_rows(browser)) == min(len(records), html.PAGE_ROWS)
    check_charts_and_links(browser, page)
    check_console(browser)  # what loading the page logged
    check_sorting(browser, records)
    check_filters(browser, records)
    check_console(browser)


@pytest.mark.slow
@pytest.mark.parametrize("run", sorted({DATA / "cpu-run", largest_run()}), ids=lambda p: p.name)
def test_report_sorts_filters_and_loads_offline(browser: Any, run: Path, tmp_path: Path) -> None:
    check_report(browser, run, tmp_path / "out")


PLANTED = {
    "sorting": ('* (dir === "asc" ? 1 : -1)', "* 1", "out of order"),
    "filtering": ("r[FIELD[f.dataset.filter]] === f.value", "r[0] === f.value", "rows shown"),
    "chart link": ('href="charts/{{ chart.name }}"', 'href="chart/{{ chart.name }}"', "does not resolve"),
    "chart image": ("base64,{{ chart.b64 }}", "base64,{{ chart.b64[:64] }}", "a chart did not load"),
    "script error": ("  applyFilters();\n})();", "  applyFilters(); undefinedFunction();\n})();", "console errors"),
}


DRAWN: dict[str, Any] = {}  # the largest run's charts, drawn by this worker's first planted defect


def charts_drawn_once(*args: Any) -> Any:
    """The report's charts (render.build_charts) for the largest run, drawn once: every planted defect is in the
    page's template, none in a chart."""
    if "charts" not in DRAWN:
        DRAWN["charts"] = build_charts(*args)
    return DRAWN["charts"]


@pytest.mark.slow
@pytest.mark.parametrize("defect", PLANTED)
def test_a_planted_defect_fails_the_browser_check(browser: Any, defect: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    old, new, message = PLANTED[defect]
    assert old in html.TEMPLATE, f"the template no longer holds {old!r}: update the planted defect"
    monkeypatch.setattr(html, "TEMPLATE", html.TEMPLATE.replace(old, new))
    monkeypatch.setattr(render, "build_charts", charts_drawn_once)
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


@pytest.mark.slow
@pytest.mark.parametrize("defect", [None, "absolute link"])
def test_every_trace_link_resolves_after_the_run_folder_moves(browser: Any, tmp_path: Path, defect: str | None,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The report written beside its results (as `attnbench run --trace` does), then the folder moved: each link is
    relative, so it still opens its trace; a link written as an absolute path would point at the old place."""
    run = Path(shutil.copytree(DATA / "trace-run", tmp_path / "run"))
    if defect:
        monkeypatch.setattr(render, "trace_links", lambda records, run_dir, out: {
            r: (run_dir / r.trace).as_uri() for r in records if r.trace})
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


def many_records(out: Path, copies: int) -> Path:
    """tests/data/cpu-run's records repeated `copies` times, each copy at its own sequence length (more than a page)."""
    base = load(DATA / "cpu-run")
    out.mkdir(parents=True)
    shutil.copy(DATA / "cpu-run" / "env.json", out / "env.json")
    with open(out / "results.jsonl", "w") as file:
        for copy in range(copies):
            for record in base:
                file.write(json.dumps({**record, "seq_len": record["seq_len"] + 8 * copy,
                                       "case_id": f"{record['case_id']}-x{copy}"}) + "\n")
    return out


@pytest.mark.slow
def test_pages_of_rows_sort_and_filter_over_every_record(browser: Any, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The records table's pages, sort and filter. The charts are left out of this report (drawing them is most of
    its render; the other browser tests load reports with their charts)."""
    monkeypatch.setattr(render, "build_charts", lambda groups, *args: ([], []))
    run = many_records(tmp_path / "run", 7)
    records = load(run)
    assert len(records) > 2 * html.PAGE_ROWS
    open_report(browser, run, tmp_path / "out")
    pages = -(-len(records) // html.PAGE_ROWS)
    assert len(visible_rows(browser)) == html.PAGE_ROWS
    assert browser.find_element("id", "page-at").text == f"1 of {pages}"
    i = column_index("time_ms")
    browser.find_elements("css selector", "#records thead th")[i].click()
    timed = sorted(r["time_ms"] for r in records if r.get("time_ms") is not None)
    first = page_values(browser, i)
    browser.find_element("id", "page-next").click()
    assert browser.find_element("id", "page-at").text == f"2 of {pages}"
    second = page_values(browser, i)
    expected = [repr(float(t)) for t in timed] + [""] * (len(records) - len(timed))
    assert [v and repr(float(v)) for v in first + second] == expected[: 2 * html.PAGE_ROWS], \
        "page 2 does not hold the next rows"
    backend, count = Counter(str(r["backend"]) for r in records).most_common()[0]
    assert count > html.PAGE_ROWS, "the filter must narrow a set spread over pages"
    choose(browser, "backend", backend)
    assert browser.find_element("id", "page-at").text == f"1 of {-(-count // html.PAGE_ROWS)}"
    assert int(browser.find_element("id", "shown").text) == count
    shown = every_page(browser, lambda: [row.get_attribute("data-backend") for row in visible_rows(browser)])
    assert shown == [backend] * count
    check_console(browser)


@pytest.mark.slow
def test_a_skipped_row_is_one_line_with_its_reason_on_screen(browser: Any, tmp_path: Path) -> None:
    run = DATA / "cpu-run"
    skipped = [r for r in load(run) if r["status"] == "skipped"]
    assert skipped, "the fixture run has skipped records"
    open_report(browser, run, tmp_path / "out")
    choose(browser, "status", "skipped")
    rows = visible_rows(browser)
    width = browser.execute_script("return document.documentElement.clientWidth")
    line = browser.execute_script("return parseFloat(getComputedStyle(document.getElementById('records')).lineHeight)")
    for row, record in zip(rows, skipped, strict=False):
        why = row.find_element("css selector", "td.why div")
        assert why.text == record["reason"]
        box = browser.execute_script("return arguments[0].getBoundingClientRect().toJSON()", why)
        assert box["right"] <= width, "the reason runs off the screen"
        assert row.size["height"] <= 2 * line + 8, f"a skipped row is {row.size['height']} px tall"


H200_CHECK = Path(__file__).parent.parent / "reports" / "NVIDIA-H200-20261204-c671d98" / "check"
SCREEN = (1400, 900)


@pytest.mark.slow
def test_the_h200_reports_first_screen_leads_with_the_answer(browser: Any, tmp_path: Path) -> None:
    """The committed H200 gpu-check run re-rendered and opened at 1400×900: its first screen names the fastest clean
    backend of the first groups beside a chart, its nine 16K errors are one cause counted 9, and jax-cudnn (timed
    beyond the datasheet) is never called fastest."""
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": SCREEN[0], "height": SCREEN[1], "deviceScaleFactor": 1, "mobile": False})
    try:
        open_report(browser, H200_CHECK, tmp_path / "out")
        shot = Path(os.environ.get("ATTNBENCH_SCREENSHOT") or tmp_path / "first-screen.png")  # to look at it
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 0
        seen = browser.execute_script("""
          function onScreen(e) { var b = e.getBoundingClientRect();
            return b.height > 0 && b.top >= 0 && b.top < innerHeight; }
          var leads = Array.prototype.map.call(document.querySelectorAll('section.lead'), function (s) {
            return {title: s.querySelector('h3').textContent, shown: onScreen(s.querySelector('li')),
                    lines: Array.prototype.map.call(s.querySelectorAll('li'), function (li) {
                      return [li.className, li.textContent]; })}; });
          var charts = Array.prototype.filter.call(document.images, function (i) {
            return onScreen(i) && i.complete && i.naturalWidth > 0; }).length;
          var causes = Array.prototype.map.call(document.querySelectorAll('#fold-errors li.cause'), function (li) {
            return li.textContent.replace(/\\s+/g, ' '); });
          return {height: innerHeight, leads: leads, charts: charts, causes: causes};""")
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert seen["height"] == SCREEN[1]
    leads = seen["leads"]
    assert len(leads) == 8
    shown = [lead for lead in leads if lead["shown"]]
    assert len(shown) >= 2 and shown == leads[:len(shown)], [lead["title"] for lead in shown]
    for lead in shown:  # each group on the first screen says its answer at 4K
        assert any(text.startswith("4K: fastest ") or text.startswith("4K: no single fastest") for _, text in
                   lead["lines"]), lead
    assert any(kind == "lead-winner" for lead in shown for kind, _ in lead["lines"])
    assert seen["charts"] >= 1, "no chart on the first screen"
    winners = [text for lead in leads for kind, text in lead["lines"] if kind == "lead-winner"]
    assert winners and not any("jax-cudnn" in text.partition(";")[0] for text in winners), winners
    sixteen = [c for c in seen["causes"] if "seq 16384" in c]
    assert len(sixteen) == 1 and "×9" in sixteen[0] and "device-side assert" in sixteen[0], seen["causes"]
    check_console(browser)
