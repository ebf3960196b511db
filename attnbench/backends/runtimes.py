"""What the JAX, ONNX Runtime and OpenVINO backends share: threads, the mask as a boolean array, NumPy views,
and a runtime profiler's kernels as the record's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attnbench.backends.spec import NOT_APPLICABLE, Answer, Answers, Limit, forward_only, unset
from attnbench.core import workload

if TYPE_CHECKING:
    import numpy as np
    import torch

    from attnbench.core.case import Case
    from attnbench.timing.profile import Profile

FORWARD_ONLY = ("attnbench times {runtime}'s forward only (its gradients do not flow "
                "back into PyTorch's autograd)")


def answers(runtime: str) -> Answers:
    """Not applicable: the runtime's CPU kernel runs outside PyTorch's deterministic mode."""
    return Answers(forward=Answer(NOT_APPLICABLE, (
        f"PyTorch's deterministic mode does not reach {runtime}'s CPU kernel, which runs outside "
        "PyTorch; the record's repeatability check compares two calls bit for bit")), on={"cuda": Answer(
        NOT_APPLICABLE, f"{runtime}'s backend here runs on the CPU only")})


def forward_only_limit(runtime: str) -> Limit:
    return forward_only(FORWARD_ONLY.format(runtime=runtime))


def run_threads() -> int:
    """The run's intra-op thread count: PyTorch's (env.json's torch_threads)."""
    import torch

    return torch.get_num_threads()


def unmapped(backend: str) -> tuple[Limit, ...]:
    """The axes no runtime adapter maps (ALiBi, head_dim_v), by name."""
    reason = f"attnbench does not map alibi or head_dim_v onto {backend}"
    return unset("alibi", reason), unset("head_dim_v", reason)


def native_causal(case: Case) -> bool:
    """Whether a runtime's top-left causal flag is docs/conventions.md's: Sq == Sk in one dense sequence."""
    return case.seq_len == case.kv_seq_len and case.doc_lens is None and case.kv_lens is None


def keep_mask(case: Case) -> np.ndarray | None:
    """The mask as a boolean (R, Sq, Sk) array, True where a query sees a key; None when nothing is masked."""
    keep = workload.visibility(case)
    return None if keep is None else keep.numpy()


def as_numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor as a NumPy array, a view when contiguous."""
    return t.detach().contiguous().numpy()


def runtime_profile(rows: dict[str, list[float]], source: str, **extra: Any) -> Profile:
    """A runtime profiler's {name: each call's ms} as the record's `kernels`, with `source` and `extra`."""
    from attnbench.timing.profile import Profile, kernels_from

    return Profile(kernels_from([(name, len(ms), sum(ms)) for name, ms in rows.items()]), source=source,
                   extra=extra)


def score_bytes(case: Case) -> int:
    """The bytes of one float32 (B, H, Sq, Sk) score matrix."""
    return case.batch * case.heads * case.seq_len * case.kv_seq_len * 4


# Below this, a resident-memory peak cannot tell a tiled kernel from an unfused one.
RESOLVED_SCORE_BYTES = 16 << 20


def path_evidence(peak: int, case: Case) -> str:
    """"unfused" when the call's peak held a float32 score matrix; else undetermined."""
    scores = score_bytes(case)
    sizes = f"peak {peak / 2**20:.1f} MiB, one float32 score matrix {scores / 2**20:.1f} MiB"
    if scores < RESOLVED_SCORE_BYTES:
        return f"undetermined ({sizes}: too small for resident memory to tell)"
    if peak >= scores:
        return f"unfused ({sizes})"
    # Memory an allocator kept from earlier calls is unseen: a low peak is no proof of a tiled kernel.
    return (f"undetermined ({sizes}: below one score matrix, but memory kept resident from "
            "earlier calls is not seen)")
