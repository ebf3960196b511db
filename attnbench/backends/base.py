"""What a backend is: a name, whether it can run here, and how to prepare a case for its kernel."""

from __future__ import annotations

import functools
import importlib.metadata
import warnings
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from attnbench.backends.spec import Answers, Limit
from attnbench.core import axes, counting, quant
from attnbench.core.counting import FUSED, MemoryCost
from attnbench.timing.bracket import TORCH_STREAM, WORK_PLACES

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case
    from attnbench.core.quant import Numerics
    from attnbench.timing.memory import DeviceStats


class Unsupported(Exception):
    """A backend cannot run a case here; the message is the `skipped` reason."""


def _identity(out: torch.Tensor) -> torch.Tensor:
    return out


@dataclass
class Prepared:
    """A case made ready: `inputs` in the kernel's layout (differentiable from q, k, v), `call(*inputs)` the
    only timed thing, `to_canonical` back to (B, H, Sq, D)."""

    inputs: tuple[torch.Tensor, ...]
    call: Callable[..., torch.Tensor]
    kernel: str
    to_canonical: Callable[[torch.Tensor], torch.Tensor] = _identity
    context: Callable[[], AbstractContextManager[Any]] = nullcontext
    kv_expanded: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    # Non-PyTorch runtimes: `to_tensor` (untimed), their profiler, memory ("rss"; on a GPU their DeviceStats).
    to_tensor: Callable[[Any], Any] = _identity
    memory: str | DeviceStats = "torch"
    profile: Callable[[], Any] | None = None
    # Inputs the library writes into by design (copies, which the integrity guard skips).
    writes: tuple[int, ...] = ()


@dataclass(frozen=True)
class LibraryCall:
    """A library function an adapter calls: its positional parameters' names in order and every keyword it may
    pass (see attnbench.backends.conformance); `optional`: the adapter copes without it."""

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
        return f"{self.name}({', '.join([*self.positional, *(f'{k}=' for k in self.keywords)])})"

    def resolve(self) -> Any:
        """The installed object: `module` imported quietly, then `qualname`'s attributes."""
        obj: Any = quiet_import(self.module)
        for part in self.qualname.split("."):
            obj = getattr(obj, part)
        return obj


@dataclass(frozen=True, kw_only=True)
class KernelCost:
    """A kernel's cost on one device kind. `pairs`: "visible" (masked blocks skipped), "causal" (triangle
    only), "dense", or "causal-flag" (triangle when causal is the whole mask); score passes: 0 when fused."""

    pairs: str
    efficiency_fwd: float
    efficiency_bwd: float
    score_passes_fwd: float = 0.0
    score_passes_bwd: float = 0.0
    calls: int = 1  # kernel launches per forward


@dataclass(frozen=True, kw_only=True)
class LibraryCompile:
    """A library's own JIT (FlashInfer's), with a cache compiled.json cannot vouch for: its keys go to the
    pool every run. Seconds of one key built, and loaded."""

    cold_s: float
    cached_s: float


@dataclass(frozen=True)
class Cost:
    """A backend's cost model for the forecast and skip rule."""

    cpu: KernelCost = KernelCost(pairs="dense", efficiency_fwd=0.3, efficiency_bwd=0.2)
    cuda: KernelCost = KernelCost(pairs="visible", efficiency_fwd=0.3, efficiency_bwd=0.2)
    compiles: bool = False
    memory: MemoryCost = FUSED  # held above its inputs
    jit: LibraryCompile | None = None  # None: torch.compile's

    def kernel(self, device: str) -> KernelCost:
        return self.cuda if device == "cuda" else self.cpu


# a backend maps these by default
SHAPE_MASK_KINDS = frozenset(a.name for a in axes.TABLE if a.mask and a.shape)


def _frozen_map(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, kw_only=True)
class Capabilities:
    """What a backend can run and how its kernels are recognised. A case using a workload axis, mask kind or
    quantized input not declared here is skipped by name, never run wrong."""

    devices: tuple[str, ...] = ("cpu", "cuda")  # elsewhere "not applicable", not "missing"
    workload_axes: frozenset[str] = frozenset()
    mask_kinds: frozenset[str] = SHAPE_MASK_KINDS
    # Why not, in the library's terms, by axis or mask kind.
    axis_reasons: Mapping[str, str] = field(default_factory=dict, hash=False)
    # Quantized inputs taken (quant.requirement: "qkv:<fmt>", "kv:<fmt>", "scale:<gran>"); others skipped by
    # name.
    quantized: frozenset[str] = frozenset()
    quant_reasons: Mapping[str, str] = field(default_factory=dict, hash=False)
    # Profiler name patterns per device or "device:mode"; empty: no verdict.
    kernel_names: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    # torch's current stream (CUDA events time it) or OWN_RUNTIME's blocking call (timed on the host: JAX,
    # ORT)
    runs_on: str = TORCH_STREAM

    def __post_init__(self) -> None:
        if self.runs_on not in WORK_PLACES:
            raise ValueError(f"Capabilities(runs_on={self.runs_on!r}): one of {', '.join(WORK_PLACES)}")
        for name, freeze in (("devices", tuple), ("workload_axes", frozenset), ("mask_kinds", frozenset),
                             ("quantized", frozenset), ("axis_reasons", _frozen_map),
                             ("quant_reasons", _frozen_map), ("kernel_names", _frozen_map)):
            object.__setattr__(self, name, freeze(getattr(self, name)))

    def attention_kernels(self, device: str, mode: str) -> tuple[str, ...]:
        return self.kernel_names.get(f"{device}:{mode}", self.kernel_names.get(device, ()))


CAPABILITY_FIELDS = tuple(f.name for f in fields(Capabilities))


@dataclass(frozen=True, kw_only=True)
class BackendSpec:
    """A backend's declared facts (`backend.name` reads `spec.name`); `limits` are checked in order."""

    name: str = ""  # "" for a base of backends
    summary: str = ""
    library: str = "torch"  # the distribution whose version is recorded
    install_hint: str | None = None  # for `doctor`
    capabilities: Capabilities = Capabilities()
    cost: Cost = Cost()
    limits: tuple[Limit, ...] = ()
    determinism: Answers | None = None  # None: refused, as undeclared


SPEC_FACTS = ("name", "summary", "library", "install_hint", "capabilities", "cost")
T = TypeVar("T")


class Fact(Generic[T]):
    """A spec field read on the class or an instance: `Backend.cost` is `Backend.spec.cost`."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.field = name

    def __get__(self, obj: object, owner: type[Backend]) -> T:
        return getattr(owner.spec, self.field)


class Backend:
    """An attention implementation: subclasses declare `spec = BackendSpec(...)` and implement `prepare`
    (docs/backends.md#plugins)."""

    spec: ClassVar[BackendSpec] = BackendSpec()
    name = Fact[str]()
    summary = Fact[str]()
    library = Fact[str]()
    install_hint = Fact[str | None]()
    capabilities = Fact[Capabilities]()
    cost = Fact[Cost]()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        where = f"{cls.__module__}.{cls.__qualname__}"
        for name in CAPABILITY_FIELDS:
            if name in vars(cls):
                raise TypeError(f"{where} sets {name}: declare {name} in "
                                "capabilities = Capabilities(...) (docs/backends.md#plugins)")
        declared = {name: vars(cls)[name] for name in SPEC_FACTS if name in vars(cls)}
        if declared and "spec" in vars(cls):
            raise TypeError(f"{where} sets {', '.join(declared)} beside spec: "
                            "declare them in its BackendSpec")
        if declared:  # a plugin's facts as class variables: into its spec
            cls.spec = replace(cls.spec, **declared)
            for name in declared:
                delattr(cls, name)

    def version(self) -> str | None:
        return installed_version(self.library)

    def availability(self, device: str) -> str | None:
        """Why this backend cannot run at all on `device`; None when it can."""
        return None

    def kernels(self) -> dict[str, Any] | None:
        """Where the library loads compiled kernels from (`state`, `summary`); None: with its import."""
        return None

    def unsupported(self, case: Case) -> str | None:
        """Why this backend cannot run `case`, before any tensor exists (its spec's first limit);
        None when it may."""
        return next((reason for limit in self.spec.limits if (reason := limit.refusal(case))), None)

    def numerics(self, case: Case) -> Numerics | None:
        """How the kernel computes `case` where not as the naive run in its dtype
        (attnbench.verify.emulate)."""
        return None

    def library_calls(self) -> tuple[LibraryCall, ...]:
        """The library calls `prepare` makes; () for plain PyTorch ops."""
        return ()

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        """Canonical (B, H, S, D) inputs to the kernel's layout, arguments bound;
        quantized: FP8 tensors, `scales=`."""
        raise NotImplementedError

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        """The library's own refusal as a skip reason; None for a real error."""
        return None

    def deterministic(self, case: Case) -> str:
        """Under `deterministic: true`: "honoured (how)", "not applicable (why)" or "refused: why"
        (skipped)."""
        if self.spec.determinism is None:
            return (f"refused: {self.name} does not say whether its kernel is "
                    "deterministic (Backend.deterministic)")
        return self.spec.determinism.of(case).sentence()

    def compile_key(self, case: Case) -> str | None:
        """What a compile in `prepare` specialises on; None when it compiles nothing."""
        return None

    def compiles_before_sharing(self, case: Case) -> int | None:
        """Lengths of one compile_key compiled before one dynamic kernel serves all; None: one each."""
        return None

    def compiling(self) -> str | None:
        """What `prepare` is compiling now, in words, for a compile stopped at its budget
        (asked from a thread)."""
        return None

    @property
    def materialises_scores(self) -> bool:
        """Whether the kernel holds the full (Sq, Sk) score matrix."""
        return self.cost.memory.score_copies_fwd > 0

    def bytes_moved(self, case: Case) -> int:
        """Unavoidable memory traffic: inputs and outputs, plus the scores where materialised."""
        return counting.bytes_moved(case) + counting.score_traffic(case, self.cost.memory)

    def estimate_memory(self, case: Case) -> int:
        return counting.memory_estimate(case, self.cost.memory)


@functools.cache
def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def module_owner(module: str, distribution: str) -> str | None:
    """Why importable `module` is not `distribution`'s file by its RECORD sha256 (flash-attn 2.8 ships a
    `flash_attn/cute` prototype); None when it is, or is not importable."""
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
        return (f"{module} is importable but {distribution} is not installed "
                f"({module} comes from {', '.join(owners) or 'an unknown package'})")
    for entry in dist.files or []:
        if Path(str(dist.locate_file(entry))).resolve() != origin:
            continue
        if entry.hash is None or entry.hash.mode != "sha256":
            return None
        digest = base64.urlsafe_b64encode(hashlib.sha256(origin.read_bytes()).digest()).rstrip(b"=").decode()
        if digest == entry.hash.value:
            return None
        break
    return (f"{module} ({origin}) is not the file {distribution} {dist.version} installed: "
            "another package overwrote or shadows it")


def refusal(backend: Backend, case: Case) -> str | None:
    """Why `backend` cannot run `case`: quantization, `unsupported`, or an unmapped axis."""
    caps = backend.capabilities
    return (quant.refusal(backend.name, caps.quantized, case, caps.quant_reasons) or backend.unsupported(case)
            or unmapped_axes(backend, case))


def unmapped_axes(backend: Backend, case: Case) -> str | None:
    """The skip reason for undeclared axes or mask kinds (`axis_reasons` first)."""
    caps = backend.capabilities
    missing = [axis for axis in case.workload_axes if axis not in caps.workload_axes]
    missing += [kind for kind in case.mask_kinds if kind not in caps.mask_kinds]
    if not missing:
        return None
    reasons = [caps.axis_reasons[axis] for axis in missing if axis in caps.axis_reasons]
    return reasons[0] if reasons else f"attnbench does not map {', '.join(missing)} onto {backend.name} yet"


def library_refusal(exc: BaseException, library: str, phrases: tuple[str, ...],
                    kinds: tuple[type[BaseException], ...]) -> str | None:
    """"`library` refused: <first line>" when `exc` is of `kinds` and carries one of `phrases`; else None."""
    if isinstance(exc, kinds) and any(phrase in str(exc) for phrase in phrases):
        return f"{library} refused: {first_line(exc)}"
    return None


def quiet_import(module: str) -> Any:
    """`importlib.import_module(module)` without the library's import-time warnings and logs."""
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
    """Why `load()` (a library's import) fails here; None when it imports."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load()
    except ImportError as exc:
        return f"{distribution} is not installed (cannot import {module}: {first_line(exc)})"
    except Exception as exc:  # a library that fails to import any other way is not usable here
        return f"{module} does not import here ({type(exc).__name__}: {first_line(exc)})"
    return None


def device_problem(device: str, devices: tuple[str, ...], elsewhere: str) -> str | None:
    """`elsewhere` off `devices`, or CUDA that torch does not see; else None."""
    if device not in devices:
        return elsewhere
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return "needs CUDA (torch.cuda.is_available() is False)"
    return None


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, else its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def warm_up(call: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...], backward: bool) -> float:
    """Seconds of one call (and backward) on detached copies: compilation stays untimed."""
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
    """Each KV head repeated for its query heads (head h reads KV head h // group)."""
    if case.kv_heads == case.heads:
        return t
    return t.repeat_interleave(case.group_size, dim=1)
