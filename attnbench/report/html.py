"""report.html: one self-contained page (charts inline as base64 PNG, no network) with every string escaped."""

from __future__ import annotations

import base64
import json
import math
import re
from typing import Any

import jinja2
import markupsafe

from attnbench.core import policy
from attnbench.gpu.describe import describe, describe_span
from attnbench.gpu.sample import run_span
from attnbench.gpu.state import GpuState
from attnbench.records.env import RunEnv
from attnbench.records.record import Record, Status
from attnbench.report.findings import Findings
from attnbench.report.lead import GroupLead
from attnbench.report.plotting import Chart
from attnbench.report.rows import COLUMNS, display_value, ran_text, sort_value

# Rows of the records table drawn at a time; the page's script sorts and filters over every record.
PAGE_ROWS = 100
LEAD_WIDTH = 660  # px: a group's chart beside its answer
_HOW_TO_READ = (
    "Statuses: ok — measured and checked; mismatch — measured, but the output missed the error bound (its time "
    "is shown, flagged, and never used for speed-ups); wrong_kernel — the profiled call ran another kernel than "
    "the backend's (its time is kept, never charted or used); implausible — timed faster than the GPU can run, over "
    "{margin}× its datasheet's compute or bandwidth roof: the timing is broken, not the kernel fast, so it is never "
    "ranked, charted or used for speed-ups; oom — ran out of device memory; error — the backend raised; "
    "timeout — exceeded the time budget; skipped — the backend does not support this case (the reason says why). "
    "A failed point is drawn as an X at the bottom of each chart panel with its status beside it.",
    "{timing}"
    "On CUDA the GPU's SM clock, clock event reasons and other processes are sampled right after "
    "each timing: a median timed while heat or power slowed the GPU, or while another process was on it, has a ! "
    "in front and a hollow marker, and compare never judges it either. The header shows each GPU twice: as read "
    "when the run started (before the run, usually idle and at a low clock) and as the records' samples saw it "
    "while timing (the range of SM clocks and power, and the clock event reasons, over the timed records).",
    "Correctness: each backend's output is compared with a reference computed in float64 on every device. "
    "It passes when max|error| ≤ 2 × the error of naive attention in the same dtype + a small per-dtype "
    "floor — FlashAttention's own test rule. Large cases may check a seeded subset of query rows (rows_checked). "
    "Two calls on the same inputs are compared bit for bit (a forward's output, a backward's gradients where they "
    "are checked): a status with ≠ after it marks a record whose calls differed (repeatable: false), and the "
    "findings name each with its largest difference. Where the two differ both are judged, and a mismatch is "
    "judged once more on a fresh call: the record takes the worst verdict.",
    "TFLOP/s counts only the (query, key) pairs the mask lets through; backward = 2.5 × forward, fwd+bwd = 3.5 ×. "
    "The dashed line is the device's dense peak for the dtype, where attnbench knows it. GB/s is the mode's "
    "memory-traffic floor (fwd: Q, K, V read and O written once; bwd: Q, K, V, O, dO read and dQ, dK, dV written; "
    "only the K/V rows some query can see; for a kernel that materialises the scores, their reads and writes too) "
    "over the median time. % of peak is TFLOP/s over the device's compute roof — a GPU's datasheet dense peak, a "
    "CPU's roof measured at the run's start (the best of short matmul repetitions in the dtype) — or, for decode "
    "(one query row), GB/s over its bandwidth roof (the datasheet's, or the best of a CPU's copies); over 100% says "
    "the roof is wrong, and the findings name the record, unless it is over {margin}× a datasheet's: then the "
    "timing is (implausible). % of measured is the same against this device's own "
    "matmul and copy (a GPU's calibration); the roofline chart puts both roofs together.",
    "Peak memory is what the call allocated above its inputs, as measured; speed-up is the baseline's median time "
    "divided by the backend's, on the same case.",
)


def how_to_read() -> tuple[str, ...]:
    """The report's legend, its statements of policy made from the policy table."""
    margin = f"{policy.PLAUSIBLE_MARGIN:g}"
    return tuple(line.replace("{timing}", policy.timing_words() + " ").replace("{margin}", margin)
                 for line in _HOW_TO_READ)

# A line ending in a backslash continues on the next, its indentation dropped.
_TEMPLATE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>attnbench report — {{ env.suite_name or "results" }}</title>
<style>
  body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px auto;
         max-width: 1360px; padding: 0 16px; color: #1a1a1a; }
  h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 19px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; }
  .env { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; background: #f6f8fa;
         padding: 10px 14px; border-radius: 6px; }
  .env dt { font-weight: 600; } .env dd { margin: 0; font-family: ui-monospace, monospace; font-size: 13px; }
  ul.findings li { margin: 3px 0; } .st { font-weight: 600; padding: 0 4px; border-radius: 3px; }
  .st-ok { color: #1a7f37; } .st-mismatch, .st-implausible { background: #ffebe9; color: #cf222e; }
  .st-error, .st-oom, .st-timeout { background: #fff1e5; color: #953800; } .st-skipped { color: #57606a; }
  .cases { color: #57606a; font-size: 12.5px; }
  figure { margin: 18px 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
  figcaption { color: #57606a; font-size: 13px; }
  .filters { margin: 8px 0; display: flex; gap: 16px; flex-wrap: wrap; align-items: center; }
  table { border-collapse: collapse; font-size: 12.5px; width: 100%; }
  th, td { border-bottom: 1px solid #e5e5e5; padding: 3px 6px; text-align: left; vertical-align: top; }
  th { background: #f6f8fa; cursor: pointer; position: sticky; top: 0; user-select: none; white-space: nowrap; }
  th[data-dir="asc"]::after { content: " ▲"; } th[data-dir="desc"]::after { content: " ▼"; }
  td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
  td.reason { min-width: 260px; max-width: 420px; overflow-wrap: anywhere; }
  td.reason div { display: -webkit-box; -webkit-box-orient: vertical; -webkit-line-clamp: 3; line-clamp: 3; \
      overflow: hidden; }
  td.why { color: #57606a; white-space: normal; overflow-wrap: anywhere; }
  .pager button { font: inherit; padding: 0 6px; }
  td.kernel, td.ran { color: #57606a; white-space: nowrap; } td.backend { white-space: nowrap; }
  .scroll { overflow-x: auto; max-width: 100%; }
  tr.bad td { background: #fff8f6; }
  .note { color: #57606a; font-size: 13px; }
  table.recommend th { cursor: default; } tr.dec-winner td:nth-child(3) { color: #1a7f37; font-weight: 600; }
  tr.dec-unsettled td:nth-child(2), tr.dec-none td:nth-child(2) { color: #953800; }
  section.lead { display: flex; gap: 16px; align-items: flex-start; border-bottom: 1px solid #eee; }
  section.lead .answer { flex: 1 1 0; min-width: 0; } section.lead figure { flex: 0 0 auto; margin: 6px 0; }
  section.lead h3 { font-size: 15px; margin: 10px 0 4px; } section.lead ul { padding-left: 18px; margin: 4px 0; }
  li.lead-winner { font-weight: 600; } li.lead-tie, li.lead-unsettled { color: #953800; }
  li.lead-none { color: #57606a; } details.fold { margin: 6px 0; } details.fold summary { cursor: pointer; }
  .count { font-weight: 600; }
</style>
</head>
<body>
<h1>attnbench report{% if env.suite_name %}: {{ env.suite_name }}{% endif %}</h1>
<p class="note">{{ device_line }}{{ counts_line }}</p>
{% if findings.noisy %}<p class="note">{{ findings.noisy }}</p>{% endif %}

<h2 id="fastest">Fastest clean backend per case group</h2>
{% for lead in leads %}<section class="lead" id="lead-{{ loop.index }}">
<div class="answer"><h3>{{ lead.title }}</h3>
<ul>{% for line in lead.lines %}<li class="lead-{{ line.kind }}">{{ line.text }}</li>{% endfor %}</ul>
{% if lead.unranked %}<p class="cases">Faster but never ranked: {{ lead.unranked | join("; ") }}.</p>{% endif %}
</div>
{% if lead.chart %}<figure id="chart-{{ lead.chart.name }}">
<img alt="{{ lead.chart.title }}" width="{{ lead_width }}" src="data:image/png;base64,{{ lead.chart.b64 }}">
<figcaption>{% if chart_files %}<a href="charts/{{ lead.chart.name }}">charts/{{ lead.chart.name }}</a>{% else %}\
    charts/{{ lead.chart.name }}{% endif %}</figcaption>
</figure>{% endif %}
</section>
{% endfor %}
<p class="note">Fastest: ok, not throttled, repeatable, its kernels the call's, and its interval apart from every \
    other clean backend's (else the overlap is named); the runner-up's time over the fastest with the interval \
    the two intervals allow. Backends that ran one kernel are one name (a = b).</p>

<h2 id="errors">Errors</h2>
<details class="fold" id="fold-errors" open{% if not findings.errors and not implausible %} hidden{% endif %}>\
    <summary>{{ error_count }} record{{ "s" if error_count != 1 }} failed, {{ findings.errors | length + \
    implausible | length }} cause{{ "s" if findings.errors | length + implausible | length != 1 }}</summary>
<ul class="findings causes">
{% for f in implausible %}<li><span class="st st-{{ f.status }}">{{ f.status }}</span> <b>{{ f.backend }}</b>:
  {{ f.reason }} <span class="cases">({{ f.cases_text }})</span></li>
{% endfor %}{% for c in findings.errors %}<li class="cause"><span class="st st-{{ c.status }}">{{ c.status }}</span> \
    <span class="count">×{{ c.count }}</span> {{ c.reason }} <span class="cases">— {{ c.backends | join(", ") }}; \
    {{ c.cases_text }}</span></li>
{% endfor %}</ul></details>
{% if not findings.errors and not implausible %}<p class="note">No mismatches and no errors.</p>{% endif %}

<h2 id="more">Findings</h2>
<details class="fold" id="fold-repeat"><summary>Repeatability: {{ repeat_summary }}</summary>
<ul class="findings">{% for line in repeat_body %}<li>{{ line }}</li>{% endfor %}</ul></details>
<details class="fold" id="fold-overhead"><summary>Overhead: {{ findings.overhead | length }} \
    backend{{ "s" if findings.overhead | length != 1 }} spend part of the call outside their attention \
    kernels</summary>
<ul class="findings">{% for line in findings.kernels %}<li>{{ line }}</li>{% endfor %}</ul></details>
<details class="fold" id="fold-skips"><summary>Skips: {{ skip_count }} record{{ "s" if skip_count != 1 }}, \
    {{ findings.skips | length }} cause{{ "s" if findings.skips | length != 1 }}</summary>
<ul class="findings">{% for c in findings.skips %}<li><span class="st st-skipped">skipped</span> \
    <span class="count">×{{ c.count }}</span> <b>{{ c.backends | join(", ") }}</b>: {{ c.reason }} \
    <span class="cases">({{ c.cases_text }})</span></li>
{% endfor %}</ul></details>
<details class="fold" id="fold-other"><summary>Other findings: roofs, speed-up, memory, noise \
    ({{ other_lines | length }})</summary>
<ul class="findings">{% for line in other_lines %}<li>{{ line }}</li>{% endfor %}</ul></details>

<h2>Environment</h2>
<dl class="env">
{% for label, value in env_rows %}<dt>{{ label }}</dt><dd>{{ value }}</dd>
{% endfor %}</dl>
{% if recommendation %}
<h2 id="recommendation">Recommendation</h2>
<p class="note">{{ recommendation.title }}. Per bucket of shapes (sequence lengths in power-of-two bands), the backend
to call: the fastest whose record is ok, timed neither throttled nor noisy, with its interval apart from every other
candidate's (else a named tie, keeping sdpa when it is in it); <i>unsettled</i> when a throttled or noisy \
    timing may be
faster. The last columns give PyTorch's own choice (sdpa) against the backend to call, and what could not be judged.
<code>attnbench recommend DIR --out dispatch.json</code> writes it as a dispatch table.</p>
<div class="scroll"><table class="recommend">
<thead><tr>{% for column in recommendation.header %}<th>{{ column }}</th>{% endfor %}</tr></thead>
<tbody>
{% for row in recommendation.rows %}<tr class="dec-{{ row.decision }}">{% for cell in row.cells %}\
    <td>{{ cell }}</td>{% endfor %}</tr>
{% endfor %}</tbody>
</table></div>
{% endif %}

<h2>How to read this</h2>
<ul class="note">
{% for line in how_to_read %}<li>{{ line }}</li>
{% endfor %}{% if baseline %}<li>Speed-ups are over <b>{{ baseline }}</b>.</li>{% endif %}
</ul>

<h2>Charts</h2>
{% for note in chart_notes %}<p class="note">{{ note }}</p>
{% endfor %}
{% for chart in charts if chart.name not in lead_charts %}<figure id="chart-{{ chart.name }}">
<img alt="{{ chart.title }}" width="{{ chart_width }}" src="data:image/png;base64,{{ chart.b64 }}">
<figcaption>{{ chart.title }} — {% if chart_files %}\
    <a href="charts/{{ chart.name }}">charts/{{ chart.name }}</a>{% else %}\
    charts/{{ chart.name }}{% endif %}</figcaption>
</figure>
{% endfor %}

<h2>All records</h2>
<div class="filters">
{% for key, label, options in filters %}<label>{{ label }}
<select data-filter="{{ key }}"><option value="">all</option>
{% for option in options %}<option value="{{ option }}">{{ option }}</option>{% endfor %}
</select></label>
{% endfor %}<span class="note">showing <span id="shown">{{ rows | length }}</span> of {{ rows | length }}; \
    click a header to sort</span>
<span class="pager"><button type="button" id="page-prev">‹ previous</button> page <span id="page-at">1 of 1</span>
<button type="button" id="page-next">next ›</button> ({{ page_rows }} rows a page)</span>
</div>
<div class="scroll"><table id="records">
<thead><tr>{% for key, header, numeric in columns %}\
    <th data-key="{{ key }}" data-type="{{ "num" if numeric else "text" }}">{{ header }}</th>{% endfor %}</tr></thead>
<tbody></tbody>
</table></div>
<noscript><p class="note">The records table is drawn by the page's script; summary.md holds them as \
    text.</p></noscript>
<script type="application/json" id="records-data">{{ rows_json }}</script>
<p class="note">Generated by attnbench {{ env.attnbench or "" }} from stored results; nothing was re-run to \
    draw this page.</p>
<script>
(function () {
  // Every record is in records-data; sorting and filtering run over all of them, and one page of rows is drawn.
  var table = document.getElementById("records"), body = table.tBodies[0], heads = table.tHead.rows[0].cells;
  var all = JSON.parse(document.getElementById("records-data").textContent);
  var PAGE = {{ page_rows }}, FIELD = {backend: 0, dtype: 1, status: 2}, keys = [], page = 0, matched = all;
  Array.prototype.forEach.call(heads, function (th) { keys.push(th.dataset.key); });
  var statusAt = keys.indexOf("status"), reasonAt = keys.indexOf("reason");
  var filters = document.querySelectorAll("select[data-filter]");
  function text(cell) { return cell === null ? "" : typeof cell === "string" ? cell : Array.isArray(cell) ? \
      cell[0] : cell.t; }
  function cellElement(r, i) {
    var td = document.createElement("td"), cell = r[3][i], key = keys[i];
    if (heads[i].dataset.type === "num") { td.className = "num"; td.dataset.v = cell === null || cell[1] === \
        null ? "" : cell[1]; }
    else if (key === "reason") { td.className = "reason"; td.title = text(cell); }
    else if (key === "kernel" || key === "ran" || key === "backend") { td.className = key; td.title = text(cell); }
    else if (key === "status") { td.className = "st st-" + r[2]; }
    if (key === "reason") { var div = document.createElement("div"); div.textContent = text(cell); \
        td.appendChild(div); }
    else if (cell !== null && cell.href) {  // the top kernel, and a link to its --trace file
      var a = document.createElement("a"); a.className = "trace"; a.href = cell.href; a.textContent = cell.label;
      td.appendChild(document.createTextNode(cell.t + " · ")); td.appendChild(a);
    }
    else { td.textContent = text(cell); }
    return td;
  }
  function rowElement(r) {
    var tr = document.createElement("tr");
    tr.className = r[2] !== "ok" ? "bad" : ""; tr.dataset.backend = r[0]; tr.dataset.dtype = r[1]; \
        tr.dataset.status = r[2];
    var measured = r[3].slice(statusAt + 1, reasonAt).some(function (cell) { return text(cell) !== ""; });
    for (var i = 0; i < keys.length; i++) {
      if (!measured && i === statusAt + 1 && reasonAt > i) {  // nothing measured: the reason fills the empty columns
        var td = document.createElement("td"), div = document.createElement("div");
        td.className = "why"; td.colSpan = reasonAt - statusAt; div.textContent = text(r[3][reasonAt]);
        td.appendChild(div); tr.appendChild(td); i = reasonAt; continue;
      }
      tr.appendChild(cellElement(r, i));
    }
    return tr;
  }
  function pages() { return Math.max(1, Math.ceil(matched.length / PAGE)); }
  function draw() {
    page = Math.min(Math.max(page, 0), pages() - 1);
    var rows = document.createDocumentFragment();
    matched.slice(page * PAGE, (page + 1) * PAGE).forEach(function (r) { rows.appendChild(rowElement(r)); });
    body.textContent = ""; body.appendChild(rows);
    var view = table.parentNode.getBoundingClientRect();  // a reason wraps within the visible width of the table
    Array.prototype.forEach.call(body.querySelectorAll("td.why div"), function (div) {
      div.style.maxWidth = Math.max(240, view.right - div.getBoundingClientRect().left - 12) + "px";
    });
    document.getElementById("shown").textContent = matched.length;
    document.getElementById("page-at").textContent = (page + 1) + " of " + pages();
    document.getElementById("page-prev").disabled = page === 0;
    document.getElementById("page-next").disabled = page >= pages() - 1;
  }
  function applyFilters() {
    matched = all.filter(function (r) {
      return Array.prototype.every.call(filters, function (f) { return !f.value || r[FIELD[f.dataset.filter]] \
          === f.value; });
    });
    page = 0; draw();
  }
  Array.prototype.forEach.call(filters, function (f) { f.addEventListener("change", applyFilters); });
  document.getElementById("page-prev").addEventListener("click", function () { page--; draw(); });
  document.getElementById("page-next").addEventListener("click", function () { page++; draw(); });
  Array.prototype.forEach.call(heads, function (th, i) {
    th.addEventListener("click", function () {
      var dir = th.dataset.dir === "asc" ? "desc" : "asc", num = th.dataset.type === "num";
      Array.prototype.forEach.call(heads, function (h) { delete h.dataset.dir; });
      th.dataset.dir = dir;
      function key(r) {
        var cell = r[3][i];
        if (!num) return text(cell).toLowerCase();
        return cell === null || cell[1] === null ? (dir === "asc" ? Infinity : -Infinity) : cell[1];
      }
      all.sort(function (a, b) { var x = key(a), y = key(b); return (x < y ? -1 : x > y ? 1 : 0) * (dir === \
          "asc" ? 1 : -1); });
      applyFilters();
    });
  });
  applyFilters();
})();
</script>
</body>
</html>
"""
TEMPLATE = re.sub(r"\\\n\s*", "", _TEMPLATE)


def table_row(record: Record, speedup: float | None, trace_href: str | None = None) -> list[Any]:
    """One record as the page's script reads it: [backend, dtype, status, cells]; a cell is its text, for a numeric
    column [text, sort number or null], null when empty, or with `trace_href` the top kernel's {t, href, label}."""
    cells: list[Any] = []
    for key, _, numeric in COLUMNS:
        if key == "ran" and trace_href is not None:
            cells.append({"t": ran_text(record, trace=False), "href": trace_href, "label": str(record.trace)})
            continue
        text = display_value(record, key, speedup)
        sort = sort_value(record, key, speedup) if numeric else ""
        number = float(sort) if sort else None
        number = number if number is not None and math.isfinite(number) else None
        cells.append(None if not text and number is None else [text, number] if numeric else text)
    return [record.backend, display_value(record, "dtype", None), str(record.status), cells]


def script_json(data: Any) -> str:
    """JSON to put inside a <script> element: no '<', '>' or '&' that could end it or open a comment."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _environment() -> jinja2.Environment:
    # Autoescape everything: backend names, kernels, reasons and suite names all come from a run.
    return jinja2.Environment(autoescape=True, undefined=jinja2.ChainableUndefined, keep_trailing_newline=True)


def env_rows(env: RunEnv, records: list[Record]) -> list[tuple[str, str]]:
    """The environment header as (label, value) pairs; missing keys are left out."""
    rows: list[tuple[str, str]] = []
    device = env.device or (records[0].device if records else None)
    gpus = env.gpus or []
    if device == "cuda" or gpus:
        names = ", ".join(str(g.get("name")) for g in gpus if isinstance(g, dict)) or env.device_name or "?"
        rows.append(("GPU", f"{names} ×{len(gpus)}" if len(gpus) > 1 else names))
        if env.driver:
            rows.append(("driver / CUDA", f"{env.driver} / CUDA {env.cuda or '?'}"))
        rows += gpu_rows(env, records)
    else:
        cpu = env.cpu or env.device_name or (records[0].device_name if records else "?")
        rows.append(("CPU", str(cpu)))
    versions = [f"torch {env.torch}"] if env.torch else []
    for name, version in sorted((env.libraries or {}).items()):
        if name == "torch" and versions:  # env.json lists torch among the libraries too: name it once
            continue
        versions.append(f"{name} {version}" if version else f"{name} not installed")
    if versions:
        rows.append(("libraries", ", ".join(versions)))
    for label, value in (("date", env.timestamp), ("suite", env.suite_name), ("suite file", env.suite_file),
                         ("git commit", env.git_commit), ("run", env.run_id), ("python", env.python),
                         ("platform", env.platform)):
        if value:
            rows.append((label, str(value)))
    if not env:
        rows.append(("environment", "no env.json beside these results"))
    return rows


def device_line(env: RunEnv, records: list[Record]) -> str:
    """The device, torch and date in one line, ending in " · " (the header's full form is below the answer)."""
    gpus = ", ".join(str(g.get("name")) for g in env.gpus or [] if isinstance(g, dict))
    device = gpus or env.device_name or env.cpu or (records[0].device_name if records else "")
    words = [str(device or ""), f"torch {env.torch}" if env.torch else "", str(env.timestamp or "")]
    return "".join(f"{w} · " for w in words if w)


def gpu_rows(env: RunEnv, records: list[Record]) -> list[tuple[str, str]]:
    """Each GPU as read when the run started and as its records saw it while timing."""
    rows = []
    states = [GpuState.from_dict(s) for s in env.gpu_state or [] if isinstance(s, dict) and "index" in s]
    for state in states:
        _, _, text = describe(state).partition(": ")
        rows.append((f"GPU {state.index} before the run" + (f" ({state.source})" if state.source else ""), text))
    spans = run_span(r.to_dict() for r in records)  # attnbench.gpu, below the records, reads their stored form
    for span in spans:
        who = span.gpu if span.gpu is not None else states[0].index if len(states) == 1 else ""
        rows.append((f"GPU {who} while timing".replace("  ", " "), describe_span(span)))
    return rows


def render_html(env: RunEnv, records: list[Record], findings: Findings, charts: list[Chart],
                chart_notes: list[str], speedups: dict[Record, float], baseline: str | None, chart_width: int,
                recommendation: dict[str, Any] | None = None, chart_files: bool = False,
                trace_links: dict[Record, str] | None = None, leads: list[GroupLead] | None = None) -> str:
    """The page as a string. `recommendation`: dispatch_table.html_section, or None; `chart_files`: captions link
    to charts/*.png beside the page; `trace_links`: each record's --trace file, relative to the page; `leads`: each
    group's answer, drawn first beside its chart (the group charts, in order)."""
    links = trace_links or {}
    drawn = [dict(name=c.name, title=c.title, b64=base64.b64encode(c.png).decode("ascii")) for c in charts]
    group_charts = [c for c in drawn if c["name"].startswith("group-")]
    lead_views = [dict(title=lead.group.title(), lines=lead.lines, unranked=lead.unranked,
                       chart=group_charts[i] if i < len(group_charts) else None)
                  for i, lead in enumerate(leads or [])]
    rows = [table_row(r, speedups.get(r), links.get(r)) for r in records]
    filters = [
        ("backend", "backend", sorted({row[0] for row in rows})),
        ("dtype", "dtype", sorted({row[1] for row in rows})),
        ("status", "status", sorted({row[2] for row in rows})),
    ]
    counts = {}
    for r in records:
        counts[r.status] = counts.get(r.status, 0) + 1
    counts_line = f"{len(records)} records: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    implausible = [f for f in findings.failures if f.status == Status.IMPLAUSIBLE]
    found = findings
    counted = found.repeat[:1] if found.repeat and found.repeat[0][:1].isdigit() else []  # "18 of 91 ..."
    other = found.roofs + found.speedup + found.memory + found.packing + found.quantized + found.noise + found.dtype
    template = _environment().from_string(TEMPLATE)
    return template.render(
        env=env, env_rows=env_rows(env, records), findings=findings, how_to_read=how_to_read(), baseline=baseline,
        charts=drawn, leads=lead_views, lead_charts={v["chart"]["name"] for v in lead_views if v["chart"]},
        lead_width=LEAD_WIDTH, device_line=device_line(env, records), implausible=implausible, other_lines=other,
        error_count=sum(c.count for c in found.errors) + sum(len(f.cases) for f in implausible),
        skip_count=sum(c.count for c in found.skips),
        repeat_summary=counted[0] if counted else "every compared measurement was repeatable"
        if any(r.repeatable is not None for r in records) else "no two calls were compared",
        repeat_body=found.repeat[len(counted):],
        chart_notes=chart_notes, filters=filters, columns=COLUMNS, rows=rows, counts_line=counts_line,
        rows_json=markupsafe.Markup(script_json(rows)), page_rows=PAGE_ROWS,
        chart_width=chart_width, recommendation=recommendation, chart_files=chart_files,
    )
