"""What a backend is: a name, whether it can run here, and how to prepare a case for its kernel."""

from __future__ import annotations

import functools
import importlib.metadata
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from attnbench.core import axes, counting, quant
from attnbench.core.counting import FUSED, MemoryCost

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case
    from attnbench.core.quant import Numerics


class Unsupported(Exception):
    """Raised by a backend that cannot run a case here; the message is the reason recorded with `skipped`."""


def _identity(out: torch.Tensor) -> torch.Tensor:
    return out


@dataclass
class Prepared:
    """A case made ready for one backend, everything outside the timed region already done.

    `inputs` are the backend's native-layout tensors, made from the canonical q, k, v by differentiable
    ops (a transpose, an expand), so gradients map back to the canonical layout by the chain rule.
    `call(*inputs)` is the only thing timed; `to_canonical` turns its output into (B, H, Sq, D).
    """

    inputs: tuple[torch.Tensor, ...]
    call: Callable[..., torch.Tensor]
    kernel: str
    to_canonical: Callable[[torch.Tensor], torch.Tensor] = _identity
    context: Callable[[], AbstractContextManager[Any]] = nullcontext
    kv_expanded: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    # A runtime other than PyTorch (JAX, ONNX Runtime, OpenVINO): `to_tensor` turns what `call` returns (its own
    # array) into a torch tensor in the kernel's layout, outside the timed call; `memory` is "rss" where the call
    # allocates outside PyTorch's allocator, so its peak is read from the process's resident memory instead.
    to_tensor: Callable[[Any], Any] = _identity
    memory: str = "torch"
    # Such a runtime's own profiler around one call of its kernel (attnbench.timing.profile.Profile), which
    # torch.profiler cannot see into: made once after the samples; its kernels are the record's `kernels`.
    profile: Callable[[], Any] | None = None
    # The positions in `inputs` of tensors the library writes into by design (SageAttention subtracts K's mean in
    # place): copies made in `prepare`, which the integrity guard does not hold unchanged (the case's own inputs,
    # it always does).
    writes: tuple[int, ...] = ()


@dataclass(frozen=True)
class LibraryCall:
    """One library function (or class) an adapter calls, and what it passes: by position, then by keyword
    (attnbench.backends.conformance holds it against the installed library).

    `positional` are the names of the parameters our positional arguments are meant for, in order (the
    names in the library's signature when the adapter was written); `keywords` are every keyword the
    adapter may pass, whichever case it runs. `optional`: the adapter copes when the function is absent.
    """

    module: str
    qualname: str
    positional: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    optional: bool = False

    @property
    def target(self) -> str:
        return f"{self.module}.{self.qualname}"

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]

    def spelled(self) -> str:
        """How we call it, e.g. `flash_attn_func(q, k, v, causal=, window_size=)`."""
        return f"{self.name}({', '.join([*self.positional, *(f'{k}=' for k in self.keywords)])})"

    def resolve(self) -> Any:
        """The installed object: import `module` (quietly: quiet_import), then follow `qualname`'s attributes."""
        obj: Any = quiet_import(self.module)
        for part in self.qualname.split("."):
            obj = getattr(obj, part)
        return obj


@dataclass(frozen=True, kw_only=True)
class KernelCost:
    """How a kernel's call time follows its work on one kind of device: which pairs it computes, at what share of the
    device's matmul rate, and how many times it moves the (Sq, Sk) score matrix through memory (0 for fused kernels).

    `pairs`: "visible" skips masked blocks; "causal" skips the causal triangle only; "dense" computes every pair;
    "causal-flag" skips the causal triangle when that is the whole mask, else (a window, passed as an explicit mask)
    computes every pair.
    """

    pairs: str
    efficiency_fwd: float
    efficiency_bwd: float
    score_passes_fwd: float = 0.0
    score_passes_bwd: float = 0.0
    calls: int = 1  # kernel launches per forward (launch overhead on a GPU)


@dataclass(frozen=True)
class Cost:
    """What the forecast and the skip rule need to know about a backend, declared beside its adapter: its kernel's
    cost per device kind, whether `prepare` compiles (a compile per `Backend.compile_key`), what it holds in memory."""

    cpu: KernelCost = KernelCost(pairs="dense", efficiency_fwd=0.3, efficiency_bwd=0.2)
    cuda: KernelCost = KernelCost(pairs="visible", efficiency_fwd=0.3, efficiency_bwd=0.2)
    compiles: bool = False
    memory: MemoryCost = FUSED  # what it holds above its inputs (attnbench.core.counting.memory_estimate)

    def kernel(self, device: str) -> KernelCost:
        return self.cuda if device == "cuda" else self.cpu


class Backend:
    """An attention implementation. Subclasses set `name` and implement `prepare`."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    # The distribution whose version is recorded with the kernel (importlib.metadata name).
    library: ClassVar[str] = "torch"
    # The devices the kernel exists for at all: elsewhere it is "not applicable", not "missing".
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    # What a user runs to make the backend available when its library is missing (for `doctor`).
    install_hint: ClassVar[str | None] = None
    # The workload axes (attnbench.core.case.AXES) prepare maps onto the kernel; a case using any other is
    # skipped with a reason before it runs, never run wrong.
    workload_axes: ClassVar[frozenset[str]] = frozenset()
    # The mask kinds (attnbench.core.axes: causal, a window, and any declared later) prepare gives the kernel. The
    # default is the shape's two, which every backend written before mask kinds were declared takes or refuses in
    # `unsupported`; a case with a kind the backend does not declare is skipped by name, never run with a wrong mask.
    mask_kinds: ClassVar[frozenset[str]] = frozenset(a.name for a in axes.TABLE if a.mask and a.shape)
    # Why the kernel cannot take an axis or mask kind, in the library's terms, where there is more to say than that
    # attnbench does not map it (unmapped_axes says this instead).
    axis_reasons: ClassVar[dict[str, str]] = {}
    # The cost model the forecast prices this backend's measurements with.
    cost: ClassVar[Cost] = Cost()
    # The quantized inputs `prepare` takes (attnbench.core.quant.requirement): "qkv:<FP8 format>" (Q, K and V), "kv:<FP8
    # format>" (an FP8 K/V cache under the case's queries) and "scale:<granularity>"; `prepare` then gets the case's
    # descale factors as `scales=`. A quantized case asking for anything else is skipped, by name (`quant_reasons`
    # says why for an item, in the library's terms): an FP8 case is never run in bf16 instead.
    quantized: ClassVar[frozenset[str]] = frozenset()
    quant_reasons: ClassVar[dict[str, str]] = {}
    # What the backend's attention kernel is called in a profile (attnbench.timing.profile): regular expressions searched
    # in the names the profiler reports, per device ("cpu": ATen ops; "cuda": device kernels), or per "device:mode"
    # where a mode runs other kernels. Empty: the backend declares none, and no kernel verdict is made.
    kernel_names: ClassVar[dict[str, tuple[str, ...]]] = {}

    def attention_kernels(self, device: str, mode: str) -> tuple[str, ...]:
        """The name patterns of this backend's attention kernels on `device` in `mode` (`kernel_names`)."""
        return self.kernel_names.get(f"{device}:{mode}", self.kernel_names.get(device, ()))

    def version(self) -> str | None:
        """The installed version of the backend's library, or None when it is not installed."""
        return installed_version(self.library)

    def availability(self, device: str) -> str | None:
        """Why this backend cannot run at all on `device` ("cpu" or "cuda"); None when it can."""
        return None

    def kernels(self) -> dict[str, Any] | None:
        """Where the library would load its compiled kernels from, found without a GPU: at least `state` and
        `summary` (`doctor` shows them); None for a library whose kernels come with its import."""
        return None

    def unsupported(self, case: Case) -> str | None:
        """Why this backend cannot run `case`, known before any tensor exists; None when it may."""
        return None

    def numerics(self, case: Case) -> Numerics | None:
        """How the kernel computes `case` where that is not the naive run in the case's dtype docs/conventions.md's bound doubles:
        its P format and accumulation (FP8 kernels), its own quantization (SageAttention). The verdict then doubles
        the error of an emulation of these (attnbench.verify.emulate). None: the naive run (for a quantized case, the plain
        emulation: dequantized inputs in float32)."""
        return None

    def library_calls(self) -> tuple[LibraryCall, ...]:
        """The library functions `prepare`'s call makes and what it passes them, for attnbench.backends.conformance
        to hold against the installed library; () for plain PyTorch ops."""
        return ()

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        """Convert canonical (B, H, S, D) inputs to the kernel's layout and bind its arguments. For a quantized case
        (only a backend whose `quantized` takes it) q, k, v are the stored FP8 tensors (q the original queries under
        an FP8 K/V cache) and `scales=` (attnbench.core.quant.Scales) holds their descale factors."""
        raise NotImplementedError

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        """The library's own refusal as a skip reason, when `exc` is one; None for a real error."""
        return None

    def deterministic(self, case: Case) -> str:
        """What a run that asks for `deterministic: true` gets from this backend on `case` (attnbench.verify.determinism):
        "honoured (how)", "not applicable (why)" or "refused: why" — the measurement is then skipped with that reason.
        The default refuses: a backend that does not say how its two calls stay alike is not timed as deterministic.
        (A cuDNN-frontend backend would answer from sdpa_backward's deterministic option and the cuDNN version.)"""
        return f"refused: {self.name} does not say whether its kernel is deterministic (Backend.deterministic)"

    def compile_key(self, case: Case) -> str | None:
        """What a compile in `prepare` specialises on (two cases with one key share a compiled kernel); None when
        `prepare` compiles nothing."""
        return None

    def compiles_before_sharing(self, case: Case) -> int | None:
        """For a kernel compiled for dynamic lengths: how many sequence lengths of one compile_key are compiled
        before one kernel serves them all; None when every compile_key is compiled once."""
        return None

    @property
    def materialises_scores(self) -> bool:
        """Whether the kernel holds the full (Sq, Sk) score matrix: memory grows with seq_len²."""
        return self.cost.memory.score_copies_fwd > 0

    def bytes_moved(self, case: Case) -> int:
        """The memory traffic this backend cannot avoid on `case`: the inputs' and outputs' floor, and the score
        matrix's reads and writes when it materialises them (attnbench.core.counting)."""
        return counting.bytes_moved(case) + counting.score_traffic(case, self.cost.memory)

    def estimate_memory(self, case: Case) -> int:
        """Analytic bytes above the inputs this backend should need for `case` (its declared MemoryCost)."""
        return counting.memory_estimate(case, self.cost.memory)


@functools.cache
def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution, or None when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def module_owner(module: str, distribution: str) -> str | None:
    """Why the importable `module` is not `distribution`'s own file; None when it is, or when it is not importable.

    Two distributions can install the same path: flash-attn 2.8 bundles a `flash_attn/cute` prototype
    (0.1.0) where flash-attn-4 installs FlashAttention 4. The file must be in the distribution's RECORD
    with the same sha256, so whichever was installed last is the one named.
    """
    import base64
    import hashlib
    import importlib.util
    from pathlib import Path

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    origin = Path(spec.origin).resolve()
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        owners = importlib.metadata.packages_distributions().get(module.split(".")[0], [])
        return f"{module} is importable but {distribution} is not installed ({module} comes from {', '.join(owners) or 'an unknown package'})"
    for entry in dist.files or []:
        if Path(str(dist.locate_file(entry))).resolve() != origin:
            continue
        if entry.hash is None or entry.hash.mode != "sha256":
            return None
        digest = base64.urlsafe_b64encode(hashlib.sha256(origin.read_bytes()).digest()).rstrip(b"=").decode()
        if digest == entry.hash.value:
            return None
        break
    return f"{module} ({origin}) is not the file {distribution} {dist.version} installed: another package overwrote or shadows it"


def refusal(backend: Backend, case: Case) -> str | None:
    """Why `backend` cannot run `case`, known from the case alone: quantized inputs it does not take, its own
    `unsupported`, or a workload axis it does not map. The runner's skip and the forecast's both ask this."""
    return (quant.refusal(backend.name, backend.quantized, case, backend.quant_reasons) or backend.unsupported(case)
            or unmapped_axes(backend, case))


def unmapped_axes(backend: Backend, case: Case) -> str | None:
    """The skip reason for a case using workload axes or mask kinds the backend does not declare (its own
    `axis_reasons` where it gives one); None when it declares them all."""
    missing = [axis for axis in case.workload_axes if axis not in backend.workload_axes]
    missing += [kind for kind in case.mask_kinds if kind not in backend.mask_kinds]
    if not missing:
        return None
    reasons = [backend.axis_reasons[axis] for axis in missing if axis in backend.axis_reasons]
    return reasons[0] if reasons else f"attnbench does not map {', '.join(missing)} onto {backend.name} yet"


def library_refusal(exc: BaseException, library: str, phrases: tuple[str, ...],
                    kinds: tuple[type[BaseException], ...]) -> str | None:
    """"`library` refused: <first line>" when `exc` is one of the `kinds` a library raises for inputs it does not
    take and says so in one of its `phrases`; None for anything else (a real error)."""
    if isinstance(exc, kinds) and any(phrase in str(exc) for phrase in phrases):
        return f"{library} refused: {first_line(exc)}"
    return None


def quiet_import(module: str) -> Any:
    """`importlib.import_module(module)` with the library's import-time warnings and log lines held back: xformers
    built for another torch logs a six-line warning at every import (from its _cpp_lib), which would print at every
    `list`, `doctor` and `run`; attnbench's reason for the backend says it once, in its own row."""
    import importlib
    import logging

    logger = logging.getLogger(module.partition(".")[0])  # the library's loggers below it inherit its level
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(module)
    finally:
        logger.setLevel(level)


def import_problem(load: Callable[[], Any], distribution: str, module: str) -> str | None:
    """Why `load()` (a library's import) fails here: the distribution is not installed, or the module fails at import
    in any other way (a CUDA-less torch, a Triton without a backend); None when it imports. Import warnings are the
    library's, not the run's."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load()
    except ImportError as exc:
        return f"{distribution} is not installed (cannot import {module}: {first_line(exc)})"
    except Exception as exc:  # noqa: BLE001 - a library that fails to import any other way is not usable here
        return f"{module} does not import here ({type(exc).__name__}: {first_line(exc)})"
    return None


def device_problem(device: str, devices: tuple[str, ...], elsewhere: str) -> str | None:
    """Why a backend made for `devices` cannot run on `device`: `elsewhere` (its own words) on a device it has no
    kernel for, or a CUDA device that torch does not see; None when it can."""
    if device not in devices:
        return elsewhere
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return "needs CUDA (torch.cuda.is_available() is False)"
    return None


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when the message is empty)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def warm_up(call: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...], backward: bool) -> float:
    """Call once (and backward once) on detached copies so compilation stays out of the timed region."""
    import time

    import torch

    start = time.perf_counter()
    leaves = tuple(t.detach().requires_grad_(backward) for t in inputs)
    with torch.set_grad_enabled(backward):
        out = call(*leaves)
        if backward:
            torch.autograd.grad(out, leaves, torch.ones_like(out))
    if out.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def expand_kv(t: torch.Tensor, case: Case) -> torch.Tensor:
    """Repeat each KV head for the query heads that read it (head h reads KV head h // group)."""
    if case.kv_heads == case.heads:
        return t
    return t.repeat_interleave(case.group_size, dim=1)
