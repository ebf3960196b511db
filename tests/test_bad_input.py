"""Bad input through the command line: one line naming the fault, exit code 2, no traceback, nothing written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app

GOOD = """\
name: b
device: cpu
backends: [naive]
timing: {warmup_ms: 0, budget_ms: 1, min_samples: 1, max_samples: 1}
sweep:
  seq_len: [32]
  heads: [4]
  head_dim: [16]
"""


def suite_with(text: str) -> Callable[[Path], list[str]]:
    def make(tmp: Path) -> list[str]:
        (tmp / "s.yaml").write_text(text)
        return ["run", str(tmp / "s.yaml"), "--out", str(tmp / "out")]
    return make


def good_run(*extra: str) -> Callable[[Path], list[str]]:
    def make(tmp: Path) -> list[str]:
        return [*suite_with(GOOD)(tmp), *extra]
    return make


def results_command(command: str, content: str) -> Callable[[Path], list[str]]:
    def make(tmp: Path) -> list[str]:
        run = tmp / "notours"
        run.mkdir()
        (run / "results.jsonl").write_text(content)
        return {"report": ["report", str(run), "--out", str(tmp / "out")],
                "compare": ["compare", str(run), str(run)],
                "merge": ["merge", str(run), "--out", str(tmp / "out")]}[command]
    return make


def unwritable_out(tmp: Path) -> list[str]:
    (tmp / "a-file").write_text("")
    return [*suite_with(GOOD)(tmp)[:-1], str(tmp / "a-file" / "run")]


CASES: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "missing suite": (lambda tmp: ["run", str(tmp / "nope.yaml"), "--out", str(tmp / "out")],
                      "nope.yaml: no such suite file"),
    "directory for a suite": (lambda tmp: ["run", str(tmp), "--out", str(tmp / "out")],
                              "is a directory; expected a suite YAML file"),
    "empty YAML": (suite_with(""), "s.yaml: the file is empty"),
    "invalid YAML": (suite_with("name: b\nsweep: [\n  x: 1\n"), "s.yaml: line 4: invalid YAML"),
    "list at the top": (suite_with("- name: b\n"), "expected a mapping with name and sweep at the top, got a list"),
    "list for a mapping": (suite_with("name: b\nsweep:\n  - seq_len: 64\n"),
                           "sweep: expected a mapping of keys to values, got a list"),
    "unknown key": (suite_with(GOOD.replace("head_dim:", "head_dmi:")),
                    "sweep.head_dmi: unknown key (did you mean 'head_dim'?)"),
    "wrong type": (suite_with(GOOD.replace("heads: [4]", "heads: [four]")),
                   "sweep.heads[0]: 'four': Input should be a valid integer"),
    "absurd size": (suite_with(GOOD.replace("seq_len: [32]", "seq_len: [1000000000]")),
                    "sweep.seq_len: 1000000000 is out of range; allowed: 1 to 2097152"),
    "kv_heads not dividing heads": (suite_with(GOOD + "  kv_heads: [3]\n"), "kv_heads: 3 does not divide heads 4"),
    "documents with fewer keys than queries": (suite_with(GOOD + "  kv_seq_len: [16]\n  documents: [2]\n"),
                                               "sweep.documents: 2 documents with kv_seq_len 16 < seq_len 32"),
    "page size zero": (suite_with(GOOD + "  page_size: [0]\n"), "sweep.page_size: 0 is out of range"),
    "tp not dividing heads": (suite_with(GOOD + "  tp: [3]\n"), "sweep.tp: 3 does not divide heads 4"),
    "no query sees a key": (suite_with(GOOD + "  kv_lengths: [[0]]\n"), "sweep.kv_lengths: no query sees any key"),
    "cache lengths outside the axis list": (suite_with(GOOD + "  batch: [3]\n  kv_lengths: [4, 16, 24]\n"),
                                            "sweep.kv_lengths: explicit cache lengths go in a list inside the axis "
                                            "list: [[4, 16, 24]]"),
    "document keys that do not add up (brackets print as written)": (
        suite_with(GOOD + "  kv_seq_len: [40]\n  documents: [[[16, 30], 16]]\n"),
        "sweep.documents: the documents' keys [30, 16] sum to 46, not kv_seq_len 40; allowed: [queries, keys] pairs"),
    "cache lengths not one per request": (suite_with(GOOD + "  batch: [2]\n  kv_lengths: [[4, 8, 16]]\n"),
                                          "sweep.kv_lengths: 3 cache lengths [4, 8, 16] for batch 2"),
    "misspelt workload axis in also": (suite_with(GOOD + "also:\n"
                                                  "  - {seq_len: 8, heads: 4, head_dim: 16, softcaps: 5}\n"),
                                       "also[0].softcaps: unknown key (did you mean 'softcap'?)"),
    "a key holding a newline (shown escaped, on one line)": (suite_with(GOOD + '"x\\ny": 1\n'), "x\\ny: unknown key"),
    "unknown dtype": (suite_with(GOOD + "  dtype: [float8]\n"),
                      "sweep.dtype[0]: 'float8' is not allowed (did you mean 'float32'?)"),
    "unknown backend": (good_run("--backend", "flash-atn"), "unknown backend 'flash-atn' (did you mean 'flash-attn'?)"),
    "unknown device": (good_run("--device", "tpu"), "--device tpu: unknown device; allowed: auto, cpu, cuda"),
    "output directory not writable": (unwritable_out, "cannot create the output directory (Not a directory)"),
    "plugin that does not import": (good_run("--plugin", "no_such_module:X"),
                                    "plugin 'no_such_module:X': cannot import no_such_module"),
    "report of a file not ours": (results_command("report", "hello\n"), "results.jsonl:1: not a JSON record"),
    "compare of a file not ours": (results_command("compare", '{"a": 1}\n'), "not an attnbench record"),
    "merge of a file not ours": (results_command("merge", "hello\n"), "results.jsonl:1: not a JSON record"),
    "timeout without isolation": (good_run("--timeout", "5", "--no-isolate"), "a time limit needs a worker process"),
    "repeated device index": (good_run("--devices", "0,0"), "--devices '0,0': expected distinct GPU indices"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_clear_line(tmp_path: Path, name: str) -> None:
    make, message = CASES[name]
    result = CliRunner().invoke(app, make(tmp_path))
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists(), "nothing written"


def test_cuda_without_cuda(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    result = CliRunner().invoke(app, good_run("--device", "cuda")(tmp_path))
    assert result.exit_code == 2 and "--device cuda: no CUDA device is available here" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    """--debug lets the user error escape as Python's traceback on stderr; without it, one line and exit 2."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "attnbench", "--debug", "run", str(tmp_path / "nope.yaml")]
    debug = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert debug.returncode == 1
    assert debug.stderr.startswith("Traceback (most recent call last):")
    assert 'attnbench/sweep/suite.py", line' in debug.stderr  # the frame that raised
    assert debug.stderr.rstrip().splitlines()[-1].startswith("attnbench.core.errors.SuiteError: ")
    assert "nope.yaml: no such suite file" in debug.stderr
    plain = subprocess.run([c for c in command if c != "--debug"], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.strip().splitlines() == [plain.stderr.strip()]
