"""What the backends on runtimes other than PyTorch (JAX, ONNX Runtime, OpenVINO) share: the run's thread count,
the conventions' (docs/conventions.md) mask as a boolean array, canonical tensors as NumPy views, and a runtime
profiler's kernels as the record's (attnbench.timing.profile.Profile)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attnbench.core import workload

if TYPE_CHECKING:
    import numpy as np
    import torch

    from attnbench.core.case import Case
    from attnbench.timing.profile import Profile

FORWARD_ONLY = "attnbench times {runtime}'s forward only (its gradients do not flow back into PyTorch's autograd)"


def deterministic(runtime: str, case: Case) -> str:
    """What `deterministic: true` means for a runtime outside PyTorch (attnbench.verify.determinism's words)."""
    if case.device != "cpu":
        return f"not applicable ({runtime}'s backend here runs on the CPU only)"
    return (f"not applicable (PyTorch's deterministic mode does not reach {runtime}'s CPU kernel, which runs outside "
            "PyTorch; the record's repeatability check compares two calls bit for bit)")


def run_threads() -> int:
    """The run's intra-op thread count: PyTorch's, which the run records in env.json (torch_threads)."""
    import torch

    return torch.get_num_threads()


def unmapped(case: Case, backend: str) -> str | None:
    """The axes no runtime adapter maps (ALiBi, a V head size of its own), by name; None when the case has neither."""
    if case.alibi or case.head_dim_v is not None:
        return f"attnbench does not map alibi or head_dim_v onto {backend}"
    return None


def native_causal(case: Case) -> bool:
    """Whether a runtime's own causal flag means the conventions' (docs/conventions.md) causal: its flag is aligned top-left, which is the
    bottom-right alignment only when Sq == Sk, and only for one dense sequence (no documents, no ragged lengths)."""
    return case.seq_len == case.kv_seq_len and case.doc_lens is None and case.kv_lens is None


def keep_mask(case: Case) -> np.ndarray | None:
    """the conventions' (docs/conventions.md) mask as a boolean (R, Sq, Sk) NumPy array, True where a query sees a key (R: 1, or the batch with
    ragged lengths); None when nothing is masked. Built outside the timed call."""
    keep = workload.visibility(case)
    return None if keep is None else keep.numpy()


def as_numpy(t: torch.Tensor) -> np.ndarray:
    """A contiguous tensor as a NumPy array: a view of the same memory (no copy) when it is contiguous."""
    return t.detach().contiguous().numpy()


def runtime_profile(rows: dict[str, list[float]], source: str, **extra: Any) -> Profile:
    """A runtime profiler's kernels ({name: each call's ms}) as the record's `kernels` (sorted by time, each with its
    share of the listed time), `source` naming that profiler; `extra`: what else its call measured."""
    from attnbench.timing.profile import Profile, kernels_from

    return Profile(kernels_from([(name, len(ms), sum(ms)) for name, ms in rows.items()]), source=source, extra=extra)


def score_bytes(case: Case) -> int:
    """The bytes of one float32 (B, H, Sq, Sk) score matrix: what an unfused kernel materialises."""
    return case.batch * case.heads * case.seq_len * case.kv_seq_len * 4


# Below this many bytes of scores a resident-memory peak cannot tell a tiled kernel from an unfused one.
RESOLVED_SCORE_BYTES = 16 << 20


def path_evidence(peak: int, case: Case) -> str:
    """Which path a profiled call took, by its measured peak: unfused when it held a float32 score matrix; otherwise
    undetermined (see below), as where the score matrix is too small for resident memory to tell."""
    scores = score_bytes(case)
    sizes = f"peak {peak / 2**20:.1f} MiB, one float32 score matrix {scores / 2**20:.1f} MiB"
    if scores < RESOLVED_SCORE_BYTES:
        return f"undetermined ({sizes}: too small for resident memory to tell)"
    if peak >= scores:
        return f"unfused ({sizes})"
    # A resident-memory peak counts only pages the call newly made resident: memory an allocator kept from earlier
    # calls is reused unseen, so a low peak is no proof of a tiled kernel.
    return f"undetermined ({sizes}: below one score matrix, but memory kept resident from earlier calls is not seen)"
