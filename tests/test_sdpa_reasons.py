"""SDPA's skip reasons name the pinned kernel's own cause; FA3/FA4 routing; who owns an imported module."""

from __future__ import annotations

import base64
import hashlib
import sys
from pathlib import Path

import pytest

from attnbench.backends.base import module_owner
from attnbench.backends.flash import output_of
from attnbench.backends.registry import default_registry
from attnbench.backends.sdpa import flash_impl_problem, pinned_kernel_reasons
from tests.helpers import make_case, measure_one

# The warnings PyTorch 2.11 gave on an H200 for one call pinned to one kernel, in order (windowed MHA
# pinned to FLASH; GQA pinned to EFFICIENT). The cuDNN block is as sdp_utils.cpp words it.
WHERE = " (Triggered internally at /pytorch/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp:{}.)"
FLASH_WITH_MASK = [
    "Memory efficient kernel not used because:" + WHERE.format(986),
    "Memory Efficient attention has been runtime disabled." + WHERE.format(552),
    "Flash attention kernel not used because:" + WHERE.format(988),
    "Flash Attention does not support non-null attn_mask." + WHERE.format(262),
    "CuDNN attention kernel not used because:" + WHERE.format(990),
    "CuDNN attention has been runtime disabled." + WHERE.format(560),
]
EFFICIENT_WITH_GQA = [
    "Memory efficient kernel not used because:" + WHERE.format(986),
    "For dense input, both fused kernels require query, key and value to have the same num_heads. "
    "Query.sizes(): [1, 16, 4096, 128], Key sizes(): [1, 4, 4096, 128], Value sizes(): [1, 4, 4096, 128] "
    "instead. To broadcast dense inputs, try using unsqueeze and expand_to before passing them into the "
    "kernel." + WHERE.format(418),
    "Flash attention kernel not used because:" + WHERE.format(988),
    "Flash attention has been runtime disabled." + WHERE.format(545),
    "CuDNN attention kernel not used because:" + WHERE.format(990),
    "CuDNN attention has been runtime disabled." + WHERE.format(560),
]
CUDNN_REFUSED = [
    "Memory efficient kernel not used because:" + WHERE.format(986),
    "Memory Efficient attention has been runtime disabled." + WHERE.format(552),
    "Flash attention kernel not used because:" + WHERE.format(988),
    "Flash attention has been runtime disabled." + WHERE.format(545),
    "CuDNN attention kernel not used because:" + WHERE.format(990),
    "cuDNN requires a head dimension of at most 128." + WHERE.format(470),
]


def test_only_the_pinned_kernels_reasons_are_kept() -> None:
    assert pinned_kernel_reasons("FLASH_ATTENTION", FLASH_WITH_MASK) == [
        "Flash Attention does not support non-null attn_mask."]
    efficient = pinned_kernel_reasons("EFFICIENT_ATTENTION", EFFICIENT_WITH_GQA)
    assert len(efficient) == 1 and efficient[0].startswith("For dense input, both fused kernels require")
    assert efficient[0].endswith("passing them into the kernel.")
    # cuDNN speaks last: its reason used to be cut off at 600 characters behind the others
    assert pinned_kernel_reasons("CUDNN_ATTENTION", CUDNN_REFUSED) == [
        "cuDNN requires a head dimension of at most 128."]


def test_auto_sdpa_keeps_every_kernels_reason_without_noise() -> None:
    reasons = pinned_kernel_reasons(None, EFFICIENT_WITH_GQA)
    assert len(reasons) == 1 and "Triggered internally" not in reasons[0]


def test_the_skip_reason_is_short_and_leads_with_the_kernel() -> None:
    import warnings

    backend = default_registry().get("sdpa-cudnn")
    caught = []
    for text in CUDNN_REFUSED:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            warnings.warn(text, stacklevel=2)
        caught.extend(seen)
    reason = backend.skip_reason(RuntimeError("No available kernel. Aborting execution."), caught)
    assert reason == "PyTorch refused CUDNN_ATTENTION: cuDNN requires a head dimension of at most 128."
    assert backend.skip_reason(RuntimeError("FA3 flash_attention forward unsupported: alibi_slopes not supported"),
                               []) == ("PyTorch's CUDNN_ATTENTION refused: FA3 flash_attention forward unsupported: "
                                       "alibi_slopes not supported")


def test_flash_implementations_are_backends_that_say_why_they_cannot_run() -> None:
    registry = default_registry()
    for name, impl in (("sdpa-flash-fa3", "FA3"), ("sdpa-flash-fa4", "FA4")):
        backend = registry.get(name)
        assert backend.availability("cpu") == f"needs CUDA (PyTorch's {impl} flash implementation is CUDA-only)"
    assert "lists no FA9 flash implementation" in flash_impl_problem("FA9")


def test_an_fa3_that_is_not_installed_is_pytorchs_own_refusal() -> None:
    from torch.nn import attention

    if "FA3" not in getattr(attention, "list_flash_attention_impls", lambda: [])():
        pytest.skip("this torch has no FA3 flash implementation to route to")
    problem = flash_impl_problem("FA3")
    assert problem is not None and "flash_attn_interface" in problem
    assert attention.current_flash_attention_impl() is None  # the trial activation was undone


def test_sdpa_flash_says_which_flash_implementation_ran() -> None:
    record = measure_one(make_case(causal=True), default_registry().get("sdpa-flash"))
    assert record.status == "ok", record.reason
    assert "FLASH_ATTENTION (PyTorch's CPU flash kernel)" in record.kernel


def test_flash_outputs_with_and_without_lse_are_both_taken() -> None:
    import torch

    out, lse = torch.ones(2), torch.zeros(1)
    assert output_of((out, lse)) is out and output_of(out) is out


def _fake_distribution(root: Path, body: bytes, recorded: bytes) -> None:
    """A package `ownedpkg` installed by distribution `owned-dist`, whose RECORD hashes `recorded`."""
    (root / "ownedpkg").mkdir()
    (root / "ownedpkg" / "__init__.py").write_bytes(body)
    info = root / "owned_dist-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: owned-dist\nVersion: 1.0\n")
    digest = base64.urlsafe_b64encode(hashlib.sha256(recorded).digest()).rstrip(b"=").decode()
    (info / "RECORD").write_text(f"ownedpkg/__init__.py,sha256={digest},{len(recorded)}\n")
    (info / "top_level.txt").write_text("ownedpkg\n")


@pytest.mark.parametrize("recorded, owned", [(b"X = 1\n", True), (b"X = 0  # the other package's file\n", False)])
def test_a_module_must_be_the_file_its_distribution_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              recorded: bytes, owned: bool) -> None:
    _fake_distribution(tmp_path, b"X = 1\n", recorded)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("ownedpkg", None)
    problem = module_owner("ownedpkg", "owned-dist")
    assert (problem is None) is owned, problem
    if not owned:
        assert "is not the file owned-dist 1.0 installed" in problem
    assert "ownedpkg is importable but flash-attn-4 is not installed" in module_owner("ownedpkg", "flash-attn-4")
