"""Kernel names as a reader knows them, taken from the H200 gpu-check run's kernel fields, and failure causes that
read alike whatever their case's shape."""
from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.records.results import load_records
from attnbench.report.findings import causes, short_rest
from attnbench.report.names import cause_of, short_kernel_name

H200 = Path(__file__).parent.parent / "reports" / "NVIDIA-H200-20261204-c671d98" / "check"


def h200_kernel_names() -> set[str]:
    return {k["name"] for r in load_records(H200) for k in r.kernels or []}


@pytest.mark.parametrize(("prefix", "short"), [
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4,", "flash_fwd_kernel"),
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<", "elementwise_kernel"),
    ("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16,", "softmax_warp_forward"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<", "cunn_SoftMaxForwardReg"),
    ("void cudnn::fusion::compute_dot_do_o_specialized<true, 128>(", "compute_dot_do_o_specialized"),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::", "fmha_cutlassF_bf16_aligned_64x128_rf_sm80"),
    ("Memcpy DtoD (Device -> Device)", "Memcpy DtoD (Device -> Device)"),
    ("triton_tem_fused_flex_attention_0", "triton_tem_fused_flex_attention_0"),
])
def test_h200_kernel_names_shorten_to_the_name_a_reader_knows(prefix: str, short: str) -> None:
    name = next(n for n in sorted(h200_kernel_names()) if n.startswith(prefix))  # a real record's kernel field
    assert short_kernel_name(name) == short


def test_no_short_name_keeps_a_template_a_parameter_list_or_a_namespace() -> None:
    names = h200_kernel_names()
    assert len(names) > 50
    for name in names:
        short = short_kernel_name(name)
        assert short and len(short) <= len(name), (name, short)
        if "<" in name or "::" in name:
            assert not any(c in short for c in "<>(),: "), (name, short)
    assert short_kernel_name("aten::copy_") == "aten::copy_"  # an op name, no signature: as it is


def test_an_overhead_rest_is_split_outside_brackets_and_shortened() -> None:
    rest = next(str(r.overhead) for r in load_records(H200) if r.overhead and "masked_fill" in str(r.overhead))
    short = short_rest(rest.partition("the rest: ")[2])
    assert short.startswith("elementwise_kernel 28% (mask construction), Memcpy DtoD (Device -> Device) 9% (copy)")
    assert "<" not in short and "lambda" not in short


def test_causes_drop_shapes_sizes_and_addresses() -> None:
    a = cause_of("Query.sizes(): [1, 16, 4096, 128], Key sizes(): [1, 4, 4096, 128] at 0x7f3a2c00")
    b = cause_of("Query.sizes(): [2, 32, 16384, 64], Key sizes(): [2, 8, 16384, 64] at 0x55d1e000")
    assert a == b == "Query.sizes(): […], Key sizes(): […] at 0x…"
    assert cause_of("tried to allocate 8.00 GiB") == cause_of("tried to allocate 2.00 GiB")
    assert cause_of("SageAttention 1.0.6 is forward-only") == "SageAttention 1.0.6 is forward-only"


def test_the_nine_h200_16k_errors_are_one_cause() -> None:
    records = load_records(H200)
    errors = causes(records, ("error",))
    assert [(c.count, len(c.backends), len(c.cases)) for c in errors] == [(9, 9, 1)]
    assert "seq 16384" in errors[0].cases[0] and "device-side assert" in errors[0].reason
