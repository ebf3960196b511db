"""The report: what a reader sees in report.html, charts/*.png and summary.md, from committed result files."""

from __future__ import annotations

import html
import json
import re
import resource
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from PIL import (
    Image,  # matplotlib depends on Pillow, so it is there wherever reports can be drawn
)

from attnbench.core.errors import ResultsError
from attnbench.core.peaks import peak_tflops_for
from attnbench.records.results import load_records, stored_lines
from attnbench.report.charts import group_chart
from attnbench.report.findings import fastest_line
from attnbench.report.groups import group_records, kv_heads_families
from attnbench.report.names import cause_of
from attnbench.report.plotting import DPI, GROUP_FIGSIZE
from attnbench.report.render import render_report
from attnbench.report.rows import COLUMNS
from attnbench.report.styles import backend_styles
from tests.helpers import loaded

DATA = Path(__file__).parent / "data"
GROUP_PX = (int(GROUP_FIGSIZE[0] * DPI), int(GROUP_FIGSIZE[1] * DPI))

# (run directory under tests/data, case groups, whether some group varies kv_heads). A recorded run is one more line,
# e.g. ("cpu-run", <its groups>, False).
RUNS = [
    ("gpu-like", 5, True),
    ("cpu-like", 2, False),
    ("cpu-run", 8, True),  # a real `attnbench run suites/quick.yaml` on a 2-core CPU
]


def write_run(directory: Path, records: list[dict[str, Any]], env: dict[str, Any] | None = None) -> Path:
    """A run directory holding these records (and an env.json when given)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    if env is not None:
        (directory / "env.json").write_text(json.dumps(env), encoding="utf-8")
    return directory


# A failure's fields of `a_record`: it carries no timing.
UNTIMED: dict[str, Any] = dict(time_ms=None, time_ms_iqr=None, time_ms_min=None, samples=0, times_ms=[])


def a_record(**overrides: Any) -> dict[str, Any]:
    """One ok record; any field can be overridden."""
    record: dict[str, Any] = dict(
        schema_version=1, run_id="t", suite="t", timestamp="2025-01-01T00:00:00+00:00", backend="sdpa",
        kernel="k", device="cpu", device_name="test cpu", dtype="float32", batch=1, seq_len=512, kv_seq_len=512,
        heads=8, kv_heads=8, head_dim=64, causal=False, window=None, mode="fwd", status="ok", reason=None,
        time_ms=1.0, time_ms_iqr=0.05, time_ms_min=0.95, samples=3, times_ms=[0.95, 1.0, 1.05], tflops=0.1,
        peak_memory_bytes=1 << 20, max_abs_error=1e-7, error_bound=1e-6,
    )
    record.update(overrides)
    if "kernel" not in overrides:  # each backend its own kernel, unless a test says two ran one
        record["kernel"] = f"{record['backend']}'s kernel"
    return record


def renders(test: Any) -> Any:
    """A test of the `rendered` runs: slow (the fixture renders three reports), and all of them on one xdist worker
    so that each run is rendered once (spread over both workers, the fixture rendered 7 times in a full pass)."""
    return pytest.mark.slow(pytest.mark.xdist_group("rendered-runs")(test))


@pytest.fixture(scope="module", params=RUNS, ids=[r[0] for r in RUNS])
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each committed run rendered once into a fresh directory."""
    name, n_groups, varies_kv = request.param
    out = tmp_path_factory.mktemp(name)
    paths = render_report(DATA / name, out)
    return dict(name=name, out=out, paths=paths, n_groups=n_groups, varies_kv=varies_kv,
                records=load_records(DATA / name), html=(out / "report.html").read_text(encoding="utf-8"),
                md=(out / "summary.md").read_text(encoding="utf-8"))


def table_rows(page: str) -> list[list[Any]]:
    """The records table's rows as the page carries them for its script: [backend, dtype, status, cells]."""
    data = re.search(r'<script type="application/json" id="records-data">(.*?)</script>', page, re.S)
    assert data, "the page carries no records table"
    return json.loads(data.group(1))


def cell_texts(page: str) -> set[str]:
    """Every text the records table shows in a cell."""
    return {cell if isinstance(cell, str) else cell[0] for row in table_rows(page) for cell in row[3] if cell}


@renders
def test_returns_every_written_file(rendered: dict[str, Any]) -> None:
    out = rendered["out"]
    on_disk = sorted(p for p in out.rglob("*") if p.is_file())
    assert sorted(rendered["paths"]) == on_disk
    assert out / "report.html" in on_disk and out / "summary.md" in on_disk


@renders
def test_html_shows_every_backend_and_every_failure_with_its_reason(rendered: dict[str, Any]) -> None:
    page = rendered["html"]
    for backend in {r.backend for r in rendered["records"]}:
        assert f'<option value="{backend}">' in page  # in the backend filter
    rows = table_rows(page)
    assert {row[0] for row in rows} == {r.backend for r in rendered["records"]}  # and in the table
    assert len(rows) == len(rendered["records"])  # one table row per record, failures included
    assert [row[2] for row in rows] == [r.status for r in rendered["records"]]
    texts = cell_texts(page)
    for record in rendered["records"]:
        if record.status != "ok":
            assert record.reason in texts, record.reason


@renders
def test_html_reason_cells_stay_three_lines_tall_with_the_whole_reason_on_hover(rendered: dict[str, Any]) -> None:
    """A 400-character skip reason would make its row ten lines tall: the cell is clamped to three lines and
    carries the whole reason as its title (the tooltip), so a skipped row is as short as an ok one."""
    page = rendered["html"]
    reason = [k for k, _, _ in COLUMNS].index("reason")
    for row, record in zip(table_rows(page), rendered["records"], strict=False):
        if record.status != "ok":
            assert row[3][reason] == record.reason  # the whole reason, which the script puts in the title
    assert 'td.className = "reason"; td.title = text(cell);' in page and "-webkit-line-clamp: 3" in page


@renders
def test_html_is_self_contained(rendered: dict[str, Any]) -> None:
    page = rendered["html"]
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<link" not in page
    images = re.findall(r'src="data:image/png;base64,', page)
    assert len(images) == len(list((rendered["out"] / "charts").glob("*.png")))


@renders
def test_html_header_names_the_environment(rendered: dict[str, Any]) -> None:
    env = json.loads((DATA / rendered["name"] / "env.json").read_text())
    page = rendered["html"]
    assert env["suite_name"] in page and env["git_commit"] in page and env["torch"] in page
    libraries = page.split("<dt>libraries</dt>", 1)[1].split("</dd>", 1)[0]
    assert libraries.count("torch ") == 1, "env.json lists torch among the libraries too: named once"
    if env["device"] == "cuda":
        assert env["gpus"][0]["name"] in page and env["driver"] in page
    else:
        assert "<dt>CPU</dt>" in page


@renders
def test_one_png_per_case_group_plus_summary_figures(rendered: dict[str, Any]) -> None:
    names = sorted(p.name for p in (rendered["out"] / "charts").glob("*.png"))
    groups = [n for n in names if n.startswith("group-")]
    assert len(groups) == rendered["n_groups"] == len(group_records(rendered["records"]))
    expected_summaries = ["correctness.png", "roofline.png"] + (["mqa-gqa.png"] if rendered["varies_kv"] else [])
    assert sorted(set(names) - set(groups)) == sorted(expected_summaries)
    if not rendered["varies_kv"]:
        assert "No MQA/GQA chart" in rendered["html"]


@renders
def test_pngs_decode_at_the_expected_size(rendered: dict[str, Any]) -> None:
    for path in (rendered["out"] / "charts").glob("*.png"):
        with Image.open(path) as image:
            image.load()
            width, height = image.size
        assert width == GROUP_PX[0], path.name
        if path.name.startswith("group-"):
            assert (width, height) == GROUP_PX
        elif path.name == "mqa-gqa.png":
            rows = len(kv_heads_families(group_records(rendered["records"])))
            assert height == round((3.9 * rows + 1.3) * DPI)


@renders
def test_markdown_tables_list_what_ran_and_name_what_never_ran_once(rendered: dict[str, Any]) -> None:
    """Each group's table has one row per length of each backend that ran at some length (failures included); a
    backend skipped at every length has no row and is named once under the table, with its reason."""
    sections = re.split(r"^### ", rendered["md"], flags=re.MULTILINE)[1:]
    tables = {s.splitlines()[0]: s for s in sections if s.splitlines()[0] != "Findings"}
    groups = group_records(rendered["records"])
    assert len(tables) == len(groups)
    for group in groups:
        table = tables[group.title()]
        timed = {r.backend for r in group.records if r.status != "skipped"}
        never = {r.backend for r in group.records} - timed
        rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
        got = sorted((cells[0].lstrip("| "), int(cells[1])) for cells in rows)
        assert got == sorted(key for key in group.by_backend_x() if key[0] not in never)
        skipped = table.split("Skipped at every length:")[-1]
        named = re.findall(r"^- (\S+): (.*)$", skipped, re.MULTILINE) if never else []
        assert sorted(name for name, _ in named) == sorted(never), group.title()
        for name, reasons in named:
            assert all(html.escape(r.reason, quote=False) in reasons for r in group.records if r.backend == name)


def test_a_cpu_run_names_its_cuda_only_backends_once_per_group() -> None:
    """The committed CPU run skips sdpa-efficient and sdpa-cudnn at every length: no table row, one line each."""
    from attnbench.report.markdown import group_table

    for group in group_records(load_records(DATA / "cpu-run")):
        text = "\n".join(group_table(group, "sdpa-math"))
        for backend in ("sdpa-efficient", "sdpa-cudnn"):
            assert f"| {backend} |" not in text and text.count(f"- {backend}: needs CUDA") == 1, text


@renders
def test_findings_name_the_failures(rendered: dict[str, Any]) -> None:
    md = rendered["md"]
    for record in rendered["records"]:
        if record.status in ("mismatch", "error"):
            line = next(x for x in md.splitlines() if x.startswith(f"- **{record.status}** ×")
                        and html.escape(cause_of(record.reason), quote=False) in x)
            assert record.backend in line.partition(": ")[0], line


def test_gpu_like_findings_are_the_planted_ones(tmp_path: Path) -> None:
    render_report(DATA / "gpu-like", tmp_path, formats=("md",))
    md = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "Largest speed-up over sdpa-math: sdpa-flash" in md
    lead = next(line for line in md.splitlines() if line.startswith("- bf16 · causal · 32 heads · d=128 · fwd: "))
    assert lead.count("fastest sdpa-flash,") == 4 and "runner-up sdpa 1.03× slower [1.02–1.05×]" in lead, lead
    assert "naive oom" in md  # memory at the longest length says naive ran out
    assert "**timeout** ×" in md and "**skipped** ×" in md and "**oom** ×4 naive" in md


def test_a_group_with_one_timed_backend_says_only_not_fastest() -> None:
    # An FP8 group on a CPU: only naive-fp8 runs there, so "fastest" would claim a comparison that was not made.
    lone = [a_record(backend="naive-fp8", seq_len=s, kv_seq_len=s) for s in (256, 512, 1024)]
    lone += [a_record(backend="sdpa", seq_len=s, kv_seq_len=s, status="skipped", reason="needs CUDA", time_ms=None)
             for s in (256, 512, 1024)]
    assert fastest_line(group_records(loaded(lone))[0]) == \
        "fp32 · no mask · 8 heads · d=64 · fwd · cpu: only naive-fp8 has a correct timing (256–1K)."
    gap = [r for r in lone if r["seq_len"] != 512 or r["backend"] != "naive-fp8"]
    assert fastest_line(group_records(loaded(gap))[0]).endswith("only naive-fp8 has a correct timing (256, 1K).")
    both = lone + [a_record(backend="naive", seq_len=512, kv_seq_len=512, time_ms=2.0)]
    assert fastest_line(group_records(loaded(both))[0]).endswith(": naive-fp8 is fastest at every length (256–1K).")


@pytest.mark.slow
def test_strings_from_a_run_are_escaped(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>"
    records = [a_record(seq_len=s, kv_seq_len=s) for s in (256, 512)]
    records.append(a_record(backend="<b>x</b>", status="error", reason=evil, tflops=None,
                            kernel="<img src=x onerror=alert(2)>", **UNTIMED))
    env = {"suite_name": "<i>suite</i>", "device": "cpu", "cpu": "<u>cpu</u>"}
    render_report(write_run(tmp_path / "run", records, env), tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert evil not in page and "<b>x</b>" not in page and "<img src=x" not in page and "<i>suite</i>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert page.count("<script>") == 1  # only the page's own sorting/filtering script
    md = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert evil not in md and "&lt;script&gt;alert(1)&lt;/script&gt;" in md


@pytest.mark.slow
def test_rendering_twice_gives_identical_files(tmp_path: Path) -> None:
    first = render_report(DATA / "gpu-like", tmp_path / "a")
    second = render_report(DATA / "gpu-like", tmp_path / "b")
    assert [p.relative_to(tmp_path / "a") for p in first] == [p.relative_to(tmp_path / "b") for p in second]
    for a, b in zip(first, second, strict=False):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_an_all_failed_run_renders_and_says_why(tmp_path: Path) -> None:
    records = [a_record(backend=b, seq_len=s, kv_seq_len=s, status=st, reason=f"{b} {st} at {s}", tflops=None,
                        peak_memory_bytes=None, max_abs_error=None, error_bound=None, **UNTIMED)
               for b, st in (("naive", "oom"), ("sdpa", "error")) for s in (256, 512)]
    paths = render_report(write_run(tmp_path / "run", records), tmp_path / "out")
    assert sorted(p.name for p in paths if p.suffix == ".png") == [
        "correctness.png", "group-01-cpu-fp32-full-h8-kv8-d64-fwd.png", "roofline.png"]
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    for record in records:
        assert record["reason"] in page
    md = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert "no backend has a clean number" in md and "neither sdpa-math nor naive ran ok" in md


def test_a_single_case_run_renders(tmp_path: Path) -> None:
    paths = render_report(write_run(tmp_path / "run", [a_record()]), tmp_path / "out", formats=("png", "md"))
    assert sorted(p.name for p in paths) == [
        "correctness.png", "group-01-cpu-fp32-full-h8-kv8-d64-fwd.png", "roofline.png", "summary.md"]
    md = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert "| sdpa | 512 | ok | 1 (IQR 0.05) |" in md  # a record without an interval shows its IQR


@pytest.mark.parametrize("run", ["gpu-like", "cpu-run"])
def test_every_failed_point_is_marked_on_the_chart(run: str) -> None:
    records = load_records(DATA / run)
    seen_never = False
    styles = backend_styles(r.backend for r in records)
    for group in group_records(records):
        fig = group_chart(group, styles, "sdpa-math", None, "NVIDIA H100 80GB HBM3")
        latency = fig.axes[0]
        marks = [line for line in latency.lines if line.get_marker() == "X"]
        never = {b for b in group.backends if all(r.status == "skipped" for r in group.records if r.backend == b)}
        failed = [r for r in group.records if r.status in ("oom", "error", "timeout", "skipped")
                  and r.backend not in never]
        assert len(marks) == len(failed), group.title()
        # a backend skipped at every length is named once in the figure instead of a row of marks
        note = " ".join(t.get_text() for t in fig.texts)
        assert all(b in note for b in never), (group.title(), never, note)
        seen_never |= bool(never)
        mismatches = [r for r in group.records if r.status == "mismatch"]
        rings = [line for line in latency.lines if line.get_markeredgecolor() == "#d62728"]
        assert len(rings) == (1 if mismatches else 0)
    assert seen_never or run != "cpu-run", "the CPU run skips sdpa-efficient and sdpa-cudnn everywhere"


def test_a_backend_keeps_its_colour_across_charts() -> None:
    records = load_records(DATA / "gpu-like")
    styles = backend_styles(r.backend for r in records)
    colours: dict[str, set[str]] = {}
    for group in group_records(records):
        fig = group_chart(group, styles, "sdpa-math", None, None)
        for handle in fig.legends[0].legend_handles:
            if handle.get_label() in styles:
                colours.setdefault(handle.get_label(), set()).add(handle.get_color())
    assert all(len(c) == 1 for c in colours.values()) and len({next(iter(c)) for c in colours.values()}) == 5


def test_group_titles_and_decode_axis() -> None:
    records = [a_record(dtype="bfloat16", causal=True, heads=32, kv_heads=8, head_dim=128, mode="fwd_bwd",
                        window=1024, batch=2, device="cuda", seq_len=s, kv_seq_len=s) for s in (1024, 2048)]
    records += [a_record(seq_len=1, kv_seq_len=k, device="cuda") for k in (1024, 4096)]
    groups = group_records(loaded(records))
    assert sorted(g.title() for g in groups) == [
        "bf16 · causal · window 1024 · 32 heads / 8 KV heads · d=128 · fwd+bwd · batch 2",
        "fp32 · no mask · 8 heads · d=64 · fwd · query length 1",
    ]
    decode = next(g for g in groups if g.fixed)
    assert decode.x_field == "kv_seq_len" and decode.xs == [1024, 4096]


@pytest.mark.parametrize(("name", "dtype", "peak"), [
    ("NVIDIA H100 80GB HBM3", "bfloat16", 989.0), ("NVIDIA H100 PCIe", "float16", 756.0),
    ("NVIDIA H200", "bfloat16", 989.0), ("NVIDIA A100-SXM4-80GB", "bfloat16", 312.0),
    ("NVIDIA A100-SXM4-80GB", "float32", 19.5), ("NVIDIA A10G", "bfloat16", None), ("NVIDIA A10", "float16", 125.0),
    ("Tesla V100-SXM2-16GB", "bfloat16", None), ("Intel(R) Xeon(R)", "float32", None), (None, "bfloat16", None),
])
def test_peak_tflops_by_device_name(name: str | None, dtype: str, peak: float | None) -> None:
    assert peak_tflops_for(name, dtype) == peak


def test_peak_override_draws_the_line(tmp_path: Path) -> None:
    records = load_records(DATA / "cpu-like")
    styles = backend_styles(r.backend for r in records)
    group = group_records(records)[0]
    fig = group_chart(group, styles, "sdpa-math", 0.2, None)
    texts = [t.get_text() for t in fig.axes[2].texts]
    assert "peak 200 GFLOP/s (fp32 dense)" in texts  # the chart's unit: every value is under 1 TFLOP/s


def test_bad_requests_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="baseline backend 'flash' is not in these results"):
        render_report(DATA / "cpu-like", tmp_path, baseline="flash")
    with pytest.raises(ResultsError, match="unknown report format"):
        render_report(DATA / "cpu-like", tmp_path, formats=("pdf",))
    with pytest.raises(ResultsError, match="no attnbench results"):
        render_report(tmp_path / "missing", tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "results.jsonl").write_text("")
    with pytest.raises(ResultsError, match="holds no records"):
        render_report(tmp_path / "empty", tmp_path)


def test_default_output_is_beside_the_results(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DATA / "cpu-like", run)
    render_report(run / "results.jsonl", formats=("md",), baseline="naive")
    assert "× vs naive" in (run / "summary.md").read_text(encoding="utf-8")


def large_run(directory: Path, n: int) -> Path:
    """A synthetic run of n records over many case groups, for the render-time budget."""
    records = []
    backends = ("naive", "sdpa", "sdpa-flash", "sdpa-math", "xformers")
    lengths = (1024, 2048, 4096, 8192, 16384)
    i = 0
    while len(records) < n:
        dtype = ("bfloat16", "float16")[i % 2]
        heads, kv_heads = 32, (32, 8, 1)[(i // 2) % 3]
        head_dim = (64, 128)[(i // 6) % 2]
        causal = bool((i // 12) % 2)
        mode = ("fwd", "fwd_bwd")[(i // 24) % 2]
        batch = 1 + (i // 48)
        for s in lengths:
            for b in backends:
                status = "oom" if b == "naive" and s == 16384 else "ok"
                timing = UNTIMED if status == "oom" else dict(time_ms=s / 1000 * (1 + backends.index(b)),
                                                              times_ms=[1.0 + k / 10 for k in range(10)])
                records.append(a_record(backend=b, dtype=dtype, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                        causal=causal, mode=mode, batch=batch, seq_len=s, kv_seq_len=s, device="cuda",
                                        status=status, reason="out of memory" if status != "ok" else None, **timing))
        i += 1
    return write_run(directory, records[:n], {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3"})


def render_cost(source: Path, out: Path) -> tuple[float, float, list[Path]]:
    """CPU seconds (ours and the chart workers'), wall seconds and the files of one render_report."""
    before = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    paths = render_report(source, out)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in zip(after, before, strict=False))
    return cpu, wall, paths


@pytest.mark.slow
def test_two_thousand_records_render_in_time_that_grows_with_their_charts_alone(tmp_path: Path) -> None:
    """2,000 records (80 case groups) cost at most 15 times what 200 (8 groups) cost (9.6 measured): drawing a
    chart per group is the work, and nothing grows with the records squared. CPU seconds (ours + chart workers')
    are compared, not wall time, so that other work on a shared test machine cannot fail it. The ceiling, 120
    CPU-seconds (a minute of two cores), holds on the slowest 2-core VM measured (58-70 CPU-seconds, 30-44 s wall):
    an absolute 60 alone failed there and passed on a faster one."""
    small, _, _ = render_cost(large_run(tmp_path / "small", 200), tmp_path / "small-out")
    source = large_run(tmp_path / "big", 2000)
    cpu, wall, paths = render_cost(source, tmp_path / "out")
    assert len([p for p in paths if p.name.startswith("group-")]) == len(group_records(load_records(source))) == 80
    assert cpu < 15 * small, f"2,000 records took {cpu:.1f} CPU-seconds, 200 took {small:.1f}"
    assert cpu < 120, f"rendering 2,000 records took {cpu:.1f} CPU-seconds ({wall:.1f} s wall)"


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None, reason="chromium is not installed (apt-get install chromium)")
def test_report_html_renders_in_a_headless_browser(tmp_path: Path) -> None:
    render_report(DATA / "gpu-like", tmp_path / "out", formats=("html",))
    shot = tmp_path / "shot.png"
    command = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1400,2400",
        (tmp_path / "out" / "report.html").as_uri(),
    ]
    subprocess.run(command, capture_output=True, timeout=120, check=False)
    assert shot.is_file(), "chromium wrote no screenshot"
    with Image.open(shot) as image:
        grey = image.convert("L")
        assert grey.size == (1400, 2400)
        low, high = grey.getextrema()
        histogram = grey.histogram()
    assert high - low > 100  # text and charts, not a blank page
    assert sum(histogram[:200]) > 0.01 * 1400 * 2400  # a good share of the page is drawn on


@pytest.mark.slow
def test_a_noisy_point_is_hollow_in_the_chart_and_marked_in_the_tables(tmp_path: Path) -> None:
    noisy = a_record(seq_len=1024, kv_seq_len=1024, time_ms=2.0, time_ms_iqr=0.5, times_ms=[1.6, 2.0, 2.4],
                     noisy=True, ci_low_ms=1.6, ci_high_ms=2.4)
    records = [a_record(noisy=False), noisy]
    out = write_run(tmp_path / "run", records)
    render_report(out)
    md = (out / "summary.md").read_text(encoding="utf-8")
    assert "| ~2 [1.6–2.4] |" in md and "| 1 (IQR 0.05) |" in md  # the interval where the record has one
    page = (out / "report.html").read_text(encoding="utf-8")
    assert {"~2", "1.6–2.4"} <= cell_texts(page) and "hollow marker" in page
    assert "1 of 2 timings are noisy (interval wider than the precision asked, or too few samples for one)" in md
    group = group_records(loaded(records))[0]
    fig = group_chart(group, backend_styles(["sdpa"]), None, None, None)
    hollow = [line for line in fig.axes[0].lines if line.get_markerfacecolor() == "white"]
    assert [(list(h.get_xdata()), list(h.get_ydata())) for h in hollow] == [([1024], [2.0])]
    assert "noisy: interval wider than asked, or under 6 samples" in [t.get_text() for t in fig.legends[0].get_texts()]
    corners = {(float(x), round(float(y), 6)) for c in fig.axes[0].collections for path in c.get_paths()
               for x, y in path.vertices}
    assert {(1024.0, 1.6), (1024.0, 2.4)} <= corners, "the band is the record's interval, not its quartiles"
    # the MQA/GQA chart marks it the same way (it drew every noisy point filled)
    from attnbench.report.charts import kv_heads_chart

    mqa = a_record(seq_len=1024, kv_seq_len=1024, kv_heads=1, time_ms=1.5, noisy=False)
    families = kv_heads_families(group_records(loaded([noisy, mqa])))
    assert len(families) == 1
    fig = kv_heads_chart(families, backend_styles(["sdpa"]))
    hollow = [line for line in fig.axes[0].lines if line.get_markerfacecolor() == "white"]
    assert [(list(h.get_xdata()), list(h.get_ydata())) for h in hollow] == [([noisy["kv_heads"]], [2.0])]
    assert "noisy: interval wider than asked, or under 6 samples" in [t.get_text() for t in fig.legends[0].get_texts()]


@pytest.mark.slow
def test_a_throttled_point_is_hollow_and_marked_and_the_gpu_state_heads_the_page(tmp_path: Path) -> None:
    from attnbench.gpu.read import snapshot
    from attnbench.gpu.smi import SmiReader
    from tests.fake_smi import H200, smi

    throttled = a_record(seq_len=1024, kv_seq_len=1024, time_ms=2.0, device="cuda", throttled=True,
                         extra={"sm_clock_mhz": 1500, "clock_event_reasons": ["sw_power_cap"],
                                "other_gpu_processes": 0})
    records = [a_record(device="cuda", throttled=False), throttled]
    out = write_run(tmp_path / "run", records, env={"device": "cuda", "gpus": [{"name": "NVIDIA H200"}],
                                                    "gpu_state": [snapshot(H200, SmiReader(smi())).to_dict()]})
    render_report(out)
    md = (out / "summary.md").read_text(encoding="utf-8")
    assert "| !2 (IQR 0.05) |" in md and "| 1 (IQR 0.05) |" in md  # records without an interval show their IQR
    assert "1 of 2 timings were taken on a throttled or shared GPU" in md
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "!2" in cell_texts(page) and "GPU 0 before the run (nvidia-smi)" in page
    assert "SM clock 345 MHz (application 1980" in page
    assert "GPU 0 while timing" in page and "SM clock 1500 MHz" in page  # the one record that has a sample
    assert "clocks not locked" in page
    fig = group_chart(group_records(loaded(records))[0], backend_styles(["sdpa"]), None, None, None)
    hollow = [line for line in fig.axes[0].lines if line.get_markerfacecolor() == "white"]
    assert [(list(h.get_xdata()), list(h.get_ydata())) for h in hollow] == [([1024], [2.0])]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "throttled or shared GPU" in labels and "noisy: interval wider than asked, or under 6 samples" not in labels
    assert fig.axes[0].get_title() == "Latency (median, IQR shaded; hollow = throttled)"


def test_the_header_shows_the_gpu_before_the_run_and_while_timing_as_the_h200_recorded_them() -> None:
    """The H200 run of 2026-11-30 01:27 read its GPU idle at 345 MHz before the run, and timed at 1695-1980 MHz:
    the header shows both, each labelled (tests/data/gpu/h200-runs.json holds that run's env and samples)."""
    from attnbench.records.env import RunEnv
    from attnbench.report.html import env_rows

    run = json.loads((DATA / "gpu" / "h200-runs.json").read_text())["runs"]["NVIDIA-H200-20261130-012712"]
    env = RunEnv.from_dict({"device": "cuda", "gpus": [{"name": "NVIDIA H200"}], "gpu_state": run["gpu_state"]})
    rows = dict(env_rows(env, load_records(DATA.parents[1] / "reports" / "NVIDIA-H200-20261130-012712" / "run")))
    assert rows["GPU 0 before the run (nvml)"].startswith("SM clock 345 MHz (application 1980, max 1980)")
    assert "clock events: gpu_idle · no other processes" in rows["GPU 0 before the run (nvml)"]
    assert rows["GPU 0 while timing"] == ("120 timings · SM clock 1695–1980 MHz · power not recorded · clock events: "
                                          "sw_power_cap (15 of 120) · other processes in 120 of 120 · "
                                          "120 of 120 flagged throttled (!)")
    cpu = dict(env_rows(RunEnv.from_dict({"device": "cpu", "cpu": "AMD EPYC"}), loaded([a_record()])))
    assert not [label for label in cpu if label.startswith("GPU")]


@pytest.mark.slow
def test_roofline_draws_both_roofs_for_a_known_gpu_and_says_when_it_cannot(tmp_path: Path) -> None:
    from attnbench.report.roofline import roofline_chart, roofline_points

    records = load_records(DATA / "gpu-like")  # device_name "NVIDIA H100 80GB HBM3 (synthetic)"
    out = tmp_path / "gpu"
    render_report(DATA / "gpu-like", out, formats=["png", "html"])
    with Image.open(out / "charts" / "roofline.png") as image:
        image.load()
        assert image.size[0] == GROUP_PX[0]
    assert 'id="chart-roofline.png"' in (out / "report.html").read_text(encoding="utf-8")
    styles = backend_styles(r.backend for r in records)
    fig = roofline_chart(records, styles, "NVIDIA H100 80GB HBM3")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "bf16/fp16 dense peak 989 TFLOP/s" in texts and "memory 3350 GB/s" in texts
    assert "compute and bandwidth roof drawn" in fig.axes[0].get_title()
    points = roofline_points(records)
    ok = [r for r in records if r.status in ("ok", "mismatch") and r.tflops]
    assert len(points) == len(ok) and all(p[1] > 0 for p in points)
    cpu = roofline_chart(load_records(DATA / "cpu-like"), backend_styles(["naive", "sdpa", "sdpa-math"]), "test cpu")
    assert "no known peaks" in cpu.axes[0].get_title() and not cpu.axes[0].texts


@pytest.mark.slow
def test_setup_cost_has_a_table_column_and_a_chart(tmp_path: Path) -> None:
    """A flex-like record's setup (mostly compile) and an SDPA one's: the table names the largest part, the chart
    is drawn at the report's width; a run whose records carry no setup (older runs) gets no such chart."""
    records = [a_record(backend="flex", time_ms=2.0, extra={"setup_ms": 4120.0, "setup_parts": {
                   "mask_build": 110.0, "compile": 3980.0, "other": 30.0}}),
               a_record(backend="sdpa", time_ms=5.0, extra={"setup_ms": 0.4, "setup_parts": {"other": 0.4}})]
    paths = render_report(write_run(tmp_path / "run", records), tmp_path / "out")
    chart = tmp_path / "out" / "charts" / "setup.png"
    assert chart in paths
    with Image.open(chart) as image:
        assert image.size[0] == GROUP_PX[0]
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "setup ms" in page and {"4120 (compile 3980)", "0.4"} <= cell_texts(page)
    older = render_report(write_run(tmp_path / "old", [a_record()]), tmp_path / "old-out", formats=("png",))
    assert not any(p.name == "setup.png" for p in older)


@pytest.mark.slow
def test_packed_documents_are_compared_with_one_sequence_in_the_findings(tmp_path: Path) -> None:
    """The same backend and case with 16 packed documents and as one sequence: the findings say how much packing
    saves (flex skips the blocks across boundaries), in both the HTML and summary.md; a backend whose two
    intervals overlap (naive, here) is no finding."""
    one = a_record(backend="flex", seq_len=16384, kv_seq_len=16384, causal=True, time_ms=1662.0)
    packed = a_record(backend="flex", seq_len=16384, kv_seq_len=16384, causal=True, time_ms=178.7, documents=16,
                      doc_lengths="equal", doc_lens=[1024] * 16)
    slower = a_record(backend="sdpa", seq_len=16384, kv_seq_len=16384, causal=True, time_ms=949.0)
    slower_packed = dict(slower, time_ms=2183.0, documents=16, doc_lengths="equal", doc_lens=[1024] * 16)
    same = a_record(backend="naive", seq_len=16384, kv_seq_len=16384, causal=True, time_ms=11083.0,
                    ci_low_ms=10607.0, ci_high_ms=11968.0)
    same_packed = dict(same, time_ms=11821.0, ci_low_ms=11645.0, ci_high_ms=15163.0, documents=16,
                       doc_lengths="equal", doc_lens=[1024] * 16)
    render_report(write_run(tmp_path / "run", [one, packed, slower, slower_packed, same, same_packed]),
                  tmp_path / "out")
    md = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert ("Packed documents: flex on 16 documents (equal) at 16K tokens takes 179 ms, 9.3× faster than on one "
            "16K-token sequence (1662 ms)") in md
    assert "sdpa on 16 documents (equal) at 16K tokens takes 2183 ms, 2.3× slower" in md
    assert "9.3× faster" in (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "naive on 16 documents" not in md  # overlapping intervals: no measurable difference


@pytest.mark.parametrize("low, high", [(0.84, 1.25), (0.97, 1.03), (1.0, 9.0), (0.01, 500.0)])
def test_a_log_axis_always_has_labelled_ticks_to_read_values_by(low: float, high: float) -> None:
    """A speed-up panel spanning 0.84-1.25x had one labelled tick (1): nothing to read a 1.2x against."""
    import matplotlib.pyplot as plt

    from attnbench.report.plotting import FigureCanvasAgg, _finish_y

    fig, ax = plt.subplots()
    try:
        ax.plot([1, 2], [low, high])
        assert _finish_y(ax, log=True, levels=0)
        FigureCanvasAgg(fig).draw()
        bottom, top = ax.get_ylim()
        shown = [t.get_text() for t in ax.get_yticklabels() if bottom <= t.get_position()[1] <= top and t.get_text()]
        assert 3 <= len(shown) <= 12, shown
    finally:
        plt.close(fig)


def test_the_roofline_places_the_h200s_materialising_kernels_on_the_memory_bound_side() -> None:
    """The H200 runs' naive and sdpa-math records (schema 1: bytes_moved was the inputs' floor) stand at 2-41 FLOP/B
    once their score traffic is counted, under the H200's ridge (989 TFLOP/s over 4.8 TB/s: 206 FLOP/B); the fused
    kernels keep their stored bytes. And no point claims more than the HBM can move."""
    from attnbench.records.results import load_records
    from attnbench.report.roofline import bytes_of, roofline_points

    records = load_records(DATA.parents[1] / "reports" / "NVIDIA-H200-20261130-012712" / "run")
    points = roofline_points(records)
    ridge = 989.0 / 4.8
    materialising = [intensity for backend, intensity, _, _ in points if backend in ("naive", "sdpa-math")]
    fused = [(r.flops / r.bytes_moved, r) for r in records
             if r.status == "ok" and r.backend == "sdpa" and r.seq_len >= 4096]
    assert len(materialising) >= 20 and max(materialising) < ridge / 4
    assert fused and all(bytes_of(r) == r.bytes_moved for _, r in fused)
    for r in records:
        if r.status == "ok" and r.backend in ("naive", "sdpa-math"):
            assert bytes_of(r) / (r.time_ms * 1e-3) < 4.8e12


@pytest.mark.slow
def test_the_energy_chart_is_drawn_when_records_carry_energy(tmp_path: Path) -> None:
    """A run whose records carry joules per token gets charts/energy.png (its values planted here: 50 W over each
    call, as a loop's counter would give); one without gets none."""
    import json

    source = DATA.parents[1] / "reports" / "cpu-AMD-EPYC-2core-long"
    records = stored_lines(source)
    for r in records:
        if r["status"] == "ok":
            joules = 50.0 * r["time_ms"] / 1e3
            r["extra"].update(energy_mj=joules * 1e3, joules_per_token=joules / (r["batch"] * r["seq_len"]))
    run = tmp_path / "with-energy"
    run.mkdir()
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    written = render_report(run)
    assert (run / "charts" / "energy.png").is_file() and run / "charts" / "energy.png" in written
    assert "Energy per token" in (run / "report.html").read_text()
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stored_lines(source)))
    render_report(plain)
    assert not (plain / "charts" / "energy.png").exists()


@pytest.mark.slow
def test_rerendering_another_run_into_the_same_folder_leaves_no_chart_of_the_old_one(tmp_path: Path) -> None:
    """A run with every kind of chart (setup costs, energy, several groups, an MQA/GQA family) rendered into a
    folder, then a one-record run into the same one: only the new run's charts are left beside its report."""
    rich = [a_record(backend=b, seq_len=n, kv_seq_len=n, kv_heads=kv, time_ms=n / 512,
                     extra={"setup_ms": 3.0, "setup_parts": {"other": 3.0}, "energy_mj": 1.0,
                            "joules_per_token": 1e-6})
            for b in ("sdpa", "naive") for n in (256, 512) for kv in (8, 2)]
    out = tmp_path / "out"
    first = render_report(write_run(tmp_path / "rich", rich), out, formats=("png",))
    assert {"setup.png", "energy.png", "mqa-gqa.png"} <= {p.name for p in first}
    second = render_report(write_run(tmp_path / "plain", [a_record()]), out, formats=("png",))
    assert sorted(p.name for p in (out / "charts").iterdir()) == sorted(p.name for p in second)
    assert not {"setup.png", "energy.png", "mqa-gqa.png"} & {p.name for p in second}


def _profiled(backend: str, time_ms: float, seq: int, names: tuple[tuple[str, float], ...],
              own: tuple[str, ...], **overrides: Any) -> dict[str, Any]:
    """A record whose kernel fields are the profiler's verdict on these (name, ms) kernels (timing.profile)."""
    from attnbench.timing.profile import judge_kernels, kernels_from

    kernels = kernels_from([(name, 1, ms) for name, ms in names])
    verdict = judge_kernels(kernels, own, {}, backend, "cpu")
    fields = dict(kernels=[k.to_dict() for k in kernels], attention_share=round(verdict.attention_share, 4))
    if verdict.overhead:
        fields["overhead"] = verdict.overhead
    return a_record(backend=backend, time_ms=time_ms, seq_len=seq, kv_seq_len=seq, **fields, **overrides)


def test_findings_name_each_length_whose_fastest_backend_is_flagged() -> None:
    """Planted: at 512 the fastest ok backend spends 45% of its call in a copy; at 1024 the fastest ok one is clean
    but a wrong_kernel record was faster still; at 2048 the fastest is clean and nothing faster ran wrong."""
    from attnbench.report.findings import build_findings

    flash = ("aten::_scaled_dot_product_flash_attention_for_cpu",)
    records = [
        _profiled("copies", 1.0, 512, (("aten::_scaled_dot_product_flash_attention_for_cpu", 55.0),
                                       ("aten::copy_", 45.0)), flash),
        _profiled("sdpa-flash", 2.0, 512, (("aten::_scaled_dot_product_flash_attention_for_cpu", 99.0),
                                           ("aten::empty", 1.0)), flash),
        _profiled("copies", 9.0, 1024, (("aten::_scaled_dot_product_flash_attention_for_cpu", 55.0),
                                        ("aten::copy_", 45.0)), flash),
        _profiled("sdpa-flash", 4.0, 1024, (("aten::_scaled_dot_product_flash_attention_for_cpu", 99.0),
                                            ("aten::empty", 1.0)), flash),
        _profiled("claims-flash", 3.0, 1024, (("aten::bmm", 60.0), ("aten::_softmax", 40.0)), flash,
                  status="wrong_kernel", reason="none of claims-flash's declared kernels ran; ran aten::bmm 60%"),
        _profiled("sdpa-flash", 8.0, 2048, (("aten::_scaled_dot_product_flash_attention_for_cpu", 99.0),
                                            ("aten::empty", 1.0)), flash),
        _profiled("claims-flash", 9.0, 2048, (("aten::bmm", 60.0), ("aten::_softmax", 40.0)), flash,
                  status="wrong_kernel", reason="none of claims-flash's declared kernels ran"),
    ]
    found = build_findings(group_records(loaded(records)), loaded(records), None)
    flagged = [line for line in found.kernels if "fastest" in line]
    assert len(flagged) == 2, found.kernels
    assert flagged[0].endswith("fastest at sequence length 512: copies, but 45% of its call is outside its attention "
                               "kernels (aten::copy_ 45% (copy)).")
    assert ("at sequence length 1024 the fastest timing is claims-flash's, but it ran the wrong kernel (none of "
            "claims-flash's declared kernels ran; ran aten::bmm 60%): that time is not claims-flash's.") in flagged[1]
    # the overhead records are listed too, one line for the backend (copies at 512 and 1024), and the wrong_kernel
    # ones among the failures
    assert [line for line in found.kernels if line.startswith("copies: ")] == [
        "copies: overhead in 2 of 2 profiled records; its declared kernels 55% of the call; the rest most often "
        "aten::copy_ (copy)."]
    wrong = [(f.backend, len(f.cases)) for f in found.failures if f.status == "wrong_kernel"]
    assert wrong == [("claims-flash", 1)] * 2


@pytest.mark.slow
def test_the_records_table_links_each_trace_that_exists_relative_to_the_page(tmp_path: Path) -> None:
    traced = a_record(backend="sdpa-flash", case_id="c1", trace="traces/c1-sdpa-flash.json",
                      kernels=[{"name": "aten::_scaled_dot_product_flash_attention_for_cpu", "calls": 1,
                                "time_ms": 1.0, "share": 1.0}], attention_share=1.0)
    gone = {**traced, "backend": "naive", "trace": "traces/c1-naive.json"}  # its file was deleted
    run = write_run(tmp_path / "run", [traced, gone])
    (run / "traces").mkdir()
    (run / "traces" / "c1-sdpa-flash.json").write_text('{"traceEvents": []}')
    render_report(run, formats=["html"])
    page = (run / "report.html").read_text()

    def links(page: str) -> list[str]:  # the top-kernel cells the page's script draws as links
        return [cell["href"] for row in table_rows(page) for cell in row[3] if isinstance(cell, dict)]

    assert links(page) == ["traces/c1-sdpa-flash.json"]
    assert "traces/c1-naive.json" in page  # named, not linked
    render_report(run, tmp_path / "elsewhere", formats=["html"])
    assert links((tmp_path / "elsewhere" / "report.html").read_text()) == ["../run/traces/c1-sdpa-flash.json"]


def test_the_findings_name_two_backends_that_ran_one_kernel_as_one_and_group_overhead_by_backend() -> None:
    """`sdpa` dispatching to FLASH_ATTENTION and the pinned `sdpa-flash` ran one kernel: the fastest line names them
    together, never one of two names for it; overhead-flagged records are one line per backend, not one each."""
    from attnbench.report.findings import build_findings
    from attnbench.report.groups import group_records

    records = [a_record(backend=b, seq_len=n, kv_seq_len=n, time_ms=t, kernel=k)
               for n in (512, 1024)
               for b, t, k in (("sdpa", 1.0, "torch sdpa auto→FLASH_ATTENTION (is_causal)"),
                               ("sdpa-flash", 1.02, "torch sdpa FLASH_ATTENTION (PyTorch's CPU flash kernel)"),
                               ("naive", 3.0, "torch matmul+softmax"))]
    for r in records:
        if r["backend"] == "naive":
            r.update(kernels=[{"name": "aten::bmm", "calls": 2, "time_ms": 1.7, "share": 0.57}], attention_share=0.57,
                     overhead="declared kernels 57% of the call (under 80%); the rest: aten::div 16%, "
                              "aten::copy_ 16% (copy), aten::masked_fill_ 6% (mask construction)")
    found = build_findings(group_records(loaded(records)), loaded(records), "naive")
    assert found.fastest == ["fp32 · no mask · 8 heads · d=64 · fwd · cpu: sdpa = sdpa-flash is fastest at every "
                             "length (512–1K)."]
    assert found.kernels == ["naive: overhead in 2 of 2 profiled records; its declared kernels 57% of the call; the "
                             "rest most often aten::div, aten::copy_ (copy), aten::masked_fill_ (mask construction).",
                             "Kernels unchecked (written before profiling): sdpa 2 of 2, sdpa-flash 2 of 2."]


def test_a_failure_at_every_case_says_so_instead_of_naming_cases() -> None:
    from attnbench.report.findings import build_findings

    records = load_records(DATA / "cpu-run")
    findings = build_findings(group_records(records), records, "sdpa-math")
    found = {(f.backend, f.status): f for f in findings.other_failures}
    cases = {r.case_id for r in records}
    for (backend, status), failure in found.items():
        hit = {r.case_id for r in records if r.backend == backend and r.status == status
               and r.reason == failure.reason}
        assert failure.cases_text.startswith("every case") == (hit == cases and len(cases) > 1), failure.cases_text
    assert any(f.cases_text.startswith("every case") for f in found.values())  # sdpa-cudnn needs CUDA everywhere
