"""The integrity guards (attnbench.verify.integrity, docs/conventions.md "Integrity guards"): each planted cheat of
attnbench.backends.testing is an `error` naming what it did, with no time; honest backends pass them all."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from attnbench.backends import testing
from attnbench.backends.registry import default_registry
from attnbench.timing.profile import foreign_streams
from attnbench.verify.integrity import checksum, sample, sign_flipped
from tests.helpers import make_case, measure_one


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_a_stale_output_is_an_error_with_no_time(mode: str) -> None:
    record = measure_one(make_case(seq_len=64, mode=mode), testing.StaleOutput())
    assert record.status == "error" and record.time_ms is None
    assert record.reason == "integrity: a call on different inputs returned the same output (a stale buffer)"


def test_a_write_into_the_query_is_an_error_naming_it() -> None:
    record = measure_one(make_case(seq_len=64), testing.WritesQuery())
    assert record.status == "error" and record.time_ms is None
    assert "the call wrote into its input q (its checksum changed)" in record.reason


def test_work_left_running_on_a_thread_is_an_error() -> None:
    record = measure_one(make_case(seq_len=64), testing.SideStream())
    assert record.status == "error" and record.time_ms is None
    assert record.reason.startswith("integrity: the output changed after the call returned: its work ran past the "
                                    "timed call on 1 thread(s) it started")


def test_an_unshifted_exponent_passes_randn_and_overflows_on_large_logits_in_fp16() -> None:
    cheat = testing.Overflows()
    plain = measure_one(make_case(seq_len=128, dtype="float16"), cheat)
    assert plain.status == "ok"
    large = measure_one(make_case(seq_len=128, dtype="float16", inputs="large_logits"), cheat)
    assert large.status == "mismatch" and large.extra["nonfinite"] and large.max_abs_error is None
    # fp16 holds these values: naive attention in fp16 stays finite (a finite bound), the NaN is the kernel's
    assert large.error_bound is not None and large.extra["naive_relative_error"] < 1
    assert "holds NaN or Inf" in large.reason


@pytest.mark.parametrize("name", ["naive", "sdpa-math", "sdpa-flash"])
def test_honest_backends_pass_every_guard(name: str) -> None:
    record = measure_one(make_case(seq_len=64, causal=True, inputs="sink"), default_registry().get(name))
    assert record.status == "ok"
    assert record.extra["integrity"] == ["inputs unchanged", "output not an input", "no work after return",
                                         "new output on other inputs"]
    # a forward's probe is its profiled call: none of the guard's own operations is counted as the kernel's
    names = {k["name"] for k in record.kernels}
    assert names and not names & {"aten::take", "aten::linspace", "aten::bitwise_xor", "aten::sum"}


def test_sign_flips_are_exact_in_every_format_and_checksums_see_one_element() -> None:
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float64):
        t = torch.randn(4, 8).to(dtype)
        assert torch.equal(sign_flipped(t).float(), -t.float()) and torch.equal(sign_flipped(sign_flipped(t)), t)
        changed = t.clone()
        changed.view(-1)[5] = sign_flipped(changed.view(-1)[5:6])[0]
        assert checksum(changed) != checksum(t)
    lengths = torch.tensor([0, 3, 7])
    assert sign_flipped(lengths) is lengths
    wide = torch.arange(10_000.0).reshape(100, 100).t()  # a transposed view: sampled in its logical order
    assert sample(wide)[:2].tolist() == [0.0, 200.0] and len(sample(wide)) == 4096  # storage order: 0, 2


class Kineto(SimpleNamespace):
    """A stand-in for one of Kineto's events as torch.profiler's results list them."""

    def name(self) -> str:
        return self.n

    def device_type(self) -> str:
        return self.kind

    def device_resource_id(self) -> int:
        return self.stream


def _events(*rows: tuple[str, int]) -> list[Kineto]:
    cpu = [Kineto(n="aten::matmul", kind="DeviceType.CPU", stream=0)]
    return cpu + [Kineto(n=name, kind="DeviceType.CUDA", stream=stream) for name, stream in rows]


def test_cuda_kernels_off_the_timed_stream_are_named() -> None:
    """The CUDA stand-in: the marker on stream 7 is the timed stream; the side stream's kernels are named."""
    side = _events(("spin_kernel", 7), ("flash_fwd_kernel", 13), ("elementwise_copy", 13))
    assert foreign_streams(side) == ("2 kernel(s) ran off the timed stream (elementwise_copy, flash_fwd_kernel): "
                                     "their work is not in the timed window")
    assert foreign_streams(_events(("spin_kernel", 7), ("flash_fwd_kernel", 7))) is None
    assert foreign_streams(_events(("flash_fwd_kernel", 13))) is None  # no marker seen: nothing to judge by


@pytest.mark.gpu
def test_a_side_stream_is_caught_on_cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    record = measure_one(make_case(device="cuda", seq_len=256), testing.SideStream())
    assert record.status == "error" and "off the timed stream" in record.reason


class ScratchQuery(testing.CheatingBackend):
    """The query-writing cheat on its own copy of Q made in prepare, declared (or not) as written by design, the way
    SageAttention's adapter declares the K it smooths in place."""

    name = "scratch-query"
    cheat = "writes-query"
    declared: tuple[int, ...] = ()

    def prepare(self, case, q, k, v):  # type: ignore[no-untyped-def]
        import dataclasses

        prepared = super().prepare(case, q.detach().clone(), k, v)
        return dataclasses.replace(prepared, writes=self.declared)


def test_a_write_into_a_declared_copy_is_allowed_and_an_undeclared_one_is_named() -> None:
    undeclared = measure_one(make_case(seq_len=64), ScratchQuery())
    assert undeclared.status == "error" and "wrote into its input 0 of the prepared" in undeclared.reason
    declared = type("Declared", (ScratchQuery,), {"declared": (0,)})()
    assert measure_one(make_case(seq_len=64), declared).status == "ok"
