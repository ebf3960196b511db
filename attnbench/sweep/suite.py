"""A suite file read through the strict schema at the edge and expanded into frozen Cases."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from attnbench.core import axes as axis_table
from attnbench.core import policy, workload
from attnbench.core.case import DEFAULT_QUANT_BLOCK, FP8_DTYPES, Case
from attnbench.core.errors import SuiteError, did_you_mean
from attnbench.sweep.mix import Traffic, expand
from attnbench.sweep.schema import AXIS_FIELDS, Axes, Block, Combo, Documents, Quant, SuiteModel, Timing


@dataclass(frozen=True)
class Suite:
    model: SuiteModel
    path: Path
    text: str

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def description(self) -> str:
        """The opening comment's first sentence (`attnbench suites`)."""
        lines = []
        for line in self.text.splitlines():
            if not line.startswith("#"):
                break
            lines.append(line.lstrip("#").strip())
        text = " ".join(lines)
        end = next((i + 1 for i, ch in enumerate(text) if ch == "." and text[i + 1:i + 2] in ("", " ")
                    and not text[max(0, i - 3):i + 1].endswith(("e.g.", "i.e.", "vs."))), len(text))
        return text[:end]

    def _blocks(self) -> list[tuple[str, Block]]:
        """`sweep`, then `also[i]`, named for messages."""
        first = [] if self.model.sweep is None else [("sweep", self.model.sweep)]
        return [*first, *((f"also[{i}]", a) for i, a in enumerate(self.model.also or []))]

    def timing(self, device: str) -> Timing:
        """On a CPU the top-level `cpu:` block's `timing:` fields replace the suite's;
        unset ones are the policy's."""
        timing = self.model.timing
        cpu = self.model.cpu
        if device == "cpu" and cpu is not None and cpu.timing is not None:
            timing = Timing.model_validate({**timing.model_dump(),
                                            **cpu.timing.model_dump(exclude_unset=True)})
        own = {name: getattr(policy.device(device), name) for name in ("precision", "rounds", "refine")
               if getattr(timing, name) is None}
        return timing.model_copy(update=own) if own else timing

    def _in_force(self, block: Block, device: str) -> Axes:
        """On a CPU the top-level `cpu:` block replaces values, then the block's own."""
        axes = Axes.model_validate(block.model_dump(exclude={"cpu"}))
        if device == "cpu":
            for overrides in (self.model.cpu, block.cpu):
                if overrides is not None:
                    replaced = overrides.model_dump(exclude={"timing"})
                    axes = axes.model_copy(update={k: v for k, v in replaced.items() if v is not None})
        return axes

    def axes(self, device: str) -> list[tuple[str, Axes]]:
        return [(name, self._in_force(block, device)) for name, block in self._blocks()]

    def cases(self, device: str) -> list[Case]:
        """Every block's cross on a resolved device ("cpu" or "cuda"), then the mix's cases."""
        cases: list[Case] = []
        for name, block in self._blocks():
            key = name
            if device == "cpu" and (self.model.cpu is not None or block.cpu is not None):
                key = "cpu" if name == "sweep" else f"cpu/{name}"
            for case in self._cross(device, self._in_force(block, device), key):
                if case not in cases:
                    cases.append(case)
        if self.model.mix is not None:
            cases.extend(c for c in self.traffic(device).cases if c not in cases)
        return cases

    def traffic(self, device: str) -> Traffic:
        if self.model.mix is None:
            raise SuiteError(f"{self.path}: has no mix: block; allowed: a suite with "
                             "mix: (e.g. suites/mix.yaml)")
        return expand(self.model.mix, device, self.path.parent, f"{self.path}: mix")

    def _cross(self, device: str, axes: Axes, key: str) -> list[Case]:
        """Every combination (dtype first, then the schema's order), checked and made a Case."""
        names = ["dtype", *(name for name in AXIS_FIELDS if name != "dtype")]
        lists = [getattr(axes, name) or [None] for name in names]
        check_quant_axes(f"{self.path}: {key}", axes)
        cases = []
        for values in itertools.product(*lists):
            combo = Combo(**dict(zip(names, values, strict=False)))
            where = f"{self.path}: {key}"
            heads, head_dim, kv_heads, seq = combo.heads, combo.head_dim, combo.kv_heads, combo.seq_len
            kv = heads if kv_heads == "heads" else kv_heads
            if kv > heads or heads % kv:
                raise SuiteError(
                    f"{where}.kv_heads: {kv} does not divide heads {heads} "
                    f"(combination heads={heads}, kv_heads={kv}); allowed: a divisor of heads, or 'heads'"
                )
            heads, kv = tp_share(where, heads, kv, combo.tp)
            kv_seq = seq if combo.kv_seq_len is None else combo.kv_seq_len
            documents, dtype, mode = combo.documents, combo.dtype, combo.mode
            docs = document_fields(where, documents, combo.doc_lengths, seq, kv_seq)
            lengths = kv_length_fields(where, combo.kv_lengths, batch := combo.batch, seq, kv_seq, documents)
            if combo.kv_shared and not (combo.head_dim_v is not None and combo.head_dim_v < head_dim):
                raise SuiteError(
                    f"{where}.kv_shared: V is K's first head_dim_v channels, so it needs a head_dim_v below "
                    f"head_dim (got head_dim {head_dim}, head_dim_v {combo.head_dim_v}); allowed: e.g. "
                    "head_dim 576, head_dim_v 512"
                )
            simple = {axis.name: (axis.to_case or _as_is)(getattr(combo, axis.name), combo)
                      for axis in axis_table.axes(shape=False) if not axis.expanded}
            case = Case(device, dtype, batch, seq, kv_seq, heads, kv, head_dim, combo.causal, combo.window,
                        mode, **docs, **lengths, **simple,
                        **quant_fields(where, dtype, combo.kv_dtype, combo.quant, mode, seq, kv_seq))
            refuse_nothing_visible(where, case)
            cases.append(case)
        return cases


def _as_is(value: Any, combo: Any) -> Any:
    return value


def tp_share(where: str, heads: int, kv_heads: int, tp: int) -> tuple[int, int]:
    """One GPU's share: heads/tp query heads and max(1, kv_heads/tp) KV heads
    (replicated when tp > kv_heads)."""
    if tp == 1:
        return heads, kv_heads
    if heads % tp:
        raise SuiteError(f"{where}.tp: {tp} does not divide heads {heads}; allowed: a divisor of heads")
    if (kv_heads % tp if kv_heads >= tp else tp % kv_heads):
        raise SuiteError(f"{where}.tp: {tp} GPUs cannot share {kv_heads} KV heads (neither divides the "
                         "other); allowed: a tp that divides kv_heads or that kv_heads divides")
    return heads // tp, max(1, kv_heads // tp)


def refuse_nothing_visible(where: str, case: Case) -> None:
    """A case where no query sees any key has nothing to measure."""
    explicit = case.doc_lengths == "explicit" or case.kv_lengths == "explicit"
    if not (explicit or case.kv_seq_len < case.seq_len) or workload.visible_total(case) > 0:
        return
    if case.kv_lengths == "explicit":
        axis = "kv_lengths"
    elif case.documents is not None:
        axis = "documents"
    else:
        axis = "kv_seq_len"
    lens = "" if case.kv_lens is None else f", cache lengths {list(case.kv_lens)}"
    raise SuiteError(f"{where}.{axis}: no query sees any key (seq_len {case.seq_len}, kv_seq_len "
                     f"{case.kv_seq_len}{lens}): every output row would be zeros, nothing to measure; "
                     "allowed: lengths that give some query a key")


def quant_fields(where: str, dtype: str, kv_dtype: str | None, quant: Quant | None, mode: str, seq: int,
                 kv_seq: int) -> dict[str, Any]:
    """Case's quantization fields. Beside an unquantized dtype `quant` is left out; an FP8 dtype's own
    kv_dtype adds nothing."""
    if kv_dtype is not None and dtype in FP8_DTYPES:
        if kv_dtype != dtype:
            raise SuiteError(f"{where}.kv_dtype: {kv_dtype} under dtype {dtype}: Q, K and V are quantized to "
                             f"{dtype} already; allowed: kv_dtype with dtype bfloat16, float16 or float32")
        kv_dtype = None
    if dtype not in FP8_DTYPES and kv_dtype is None:
        return {}
    if mode != "fwd":
        got = f"kv_dtype {kv_dtype}" if kv_dtype else f"dtype {dtype}"
        raise SuiteError(f"{where}.mode: attnbench quantizes inputs for forward measurements only "
                         f"(got {mode} with {got}); allowed: fwd")
    quant = quant or Quant()
    block = None
    if quant.granularity == "block":
        block = quant.block or DEFAULT_QUANT_BLOCK
        lengths = [("kv_seq_len", kv_seq)] + ([("seq_len", seq)] if dtype in FP8_DTYPES else [])
        for name, length in lengths:
            if length % block:
                raise SuiteError(f"{where}.quant.block: {block} does not divide {name} {length} (one scale "
                                 f"per block of {block} tokens); allowed: a block size that "
                                 "divides every length it blocks")
    return {"kv_dtype": kv_dtype, "quant": quant.granularity, "quant_block": block,
            "quant_scale": None if quant.scale == "amax" else float(quant.scale)}


def check_quant_axes(where: str, axes: Axes) -> None:
    """`quant` with nothing to quantize is a mistake."""
    if any(q is not None for q in axes.quant) and not any(d in FP8_DTYPES for d in axes.dtype) \
            and not any(axes.kv_dtype):
        raise SuiteError(f"{where}.quant: scales need quantized inputs, but dtype is {', '.join(axes.dtype)} "
                         "with no kv_dtype; allowed: quant with an FP8 dtype (float8_e4m3fn, "
                         "float8_e5m2) or a kv_dtype")


def document_fields(where: str, documents: Documents, doc_lengths: str, seq: int,
                    kv_seq: int) -> dict[str, Any]:
    """A count splits seq_len (equal or random) and a cached prefix (equal shares); an explicit list gives
    lengths or [queries, keys] pairs, summing to seq_len and kv_seq_len."""
    if documents is None:
        return {}
    if isinstance(documents, list):
        if doc_lengths == "random":
            raise SuiteError(f"{where}.doc_lengths: random draws the lengths, but documents {documents} "
                             "gives them; allowed: equal with explicit lengths")
        queries = [d[0] if isinstance(d, list) else d for d in documents]
        keys = [d[1] if isinstance(d, list) else d for d in documents]
        if sum(queries) != seq:
            raise SuiteError(f"{where}.documents: lengths {documents} sum to {sum(queries)} "
                             f"queries, not seq_len {seq}")
        if sum(keys) != kv_seq:
            raise SuiteError(f"{where}.documents: the documents' keys {keys} sum to {sum(keys)}, not "
                             f"kv_seq_len {kv_seq}; allowed: [queries, keys] pairs "
                             "whose keys sum to kv_seq_len")
        return {"documents": len(documents), "doc_lengths": "explicit", "doc_lens": tuple(queries),
                "doc_kv_lens": None if keys == queries else tuple(keys)}
    if kv_seq < seq:
        raise SuiteError(f"{where}.documents: {documents} documents with kv_seq_len {kv_seq} < seq_len "
                         f"{seq}: a count shares out a cached prefix (kv_seq_len - seq_len keys); allowed: "
                         "kv_seq_len >= seq_len, or explicit [queries, keys] pairs")
    if documents > seq:
        raise SuiteError(f"{where}.documents: {documents} documents cannot fit in seq_len "
                         f"{seq} (each needs a token)")
    return {"documents": documents, "doc_lengths": doc_lengths}


def kv_length_fields(where: str, kv_lengths: Any, batch: int, seq: int, kv_seq: int,
                     documents: Documents) -> dict[str, Any]:
    """None for equal, seeded for random, or one explicit length per request (0..kv_seq_len)."""
    if kv_lengths == "equal":
        return {}
    if documents is not None:
        raise SuiteError(f"{where}.kv_lengths: {kv_lengths} with packed documents: a document's keys are "
                         "given in documents ([queries, keys] pairs); allowed: equal with documents")
    if kv_lengths == "random":
        if kv_seq <= seq:
            raise SuiteError(
                f"{where}.kv_lengths: random needs kv_seq_len > seq_len (each request's cache holds its own "
                f"{seq} queries and up to kv_seq_len keys; got kv_seq_len {kv_seq}); allowed: equal here, or "
                f"explicit lengths such as [[4, 16, 24]]"
            )
        return {"kv_lengths": "random"}
    if len(kv_lengths) != batch:
        raise SuiteError(f"{where}.kv_lengths: {len(kv_lengths)} cache lengths {kv_lengths} for batch "
                         f"{batch}; allowed: one length per request")
    if max(kv_lengths) > kv_seq:
        raise SuiteError(f"{where}.kv_lengths: cache length {max(kv_lengths)} > kv_seq_len "
                         f"{kv_seq}; allowed: 0 to kv_seq_len")
    return {"kv_lengths": "explicit", "kv_lens": tuple(kv_lengths)}


STARTER = Path(__file__).parent.parent / "templates" / "starter.yaml"


def packaged_suites() -> dict[str, Path]:
    """By name, the path under suites/ without .yaml (`long`, `models/llama-3.1-8b`)."""
    folder = Path(__file__).parent.parent / "suites"
    return {p.relative_to(folder).with_suffix("").as_posix(): p for p in sorted(folder.rglob("*.yaml"))}


def resolve_suite(path: Path | str) -> Path:
    """An existing path, else a packaged suite's name."""
    path = Path(path)
    if path.exists():
        return path
    return packaged_suites().get(path.as_posix().removesuffix(".yaml"), path)


def load_suite(path: Path | str, expand: bool = True) -> Suite:
    """Any problem raises SuiteError in one line;
    `expand=False` checks the schema only (faster, for doctor)."""
    path = resolve_suite(path)
    if not path.exists():
        names = list(packaged_suites())
        hint = did_you_mean(path.as_posix().removesuffix(".yaml"), names)
        raise SuiteError(f"{path}: no such suite file{hint}; packaged suites: {', '.join(names)}")
    if path.is_dir():
        raise SuiteError(f"{path}: is a directory; expected a suite YAML file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"{path}: cannot be read ({exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SuiteError(f"{path}: {where}invalid YAML ({problem})") from None
    if data is None:
        raise SuiteError(f"{path}: the file is empty; expected a mapping with name and sweep")
    if not isinstance(data, dict):
        raise SuiteError(f"{path}: expected a mapping with name and sweep at the top, "
                         f"got a {type(data).__name__}")
    try:
        model = SuiteModel.model_validate(data)
    except ValidationError as exc:
        raise SuiteError(f"{path}: {describe_validation_error(exc)}") from None
    suite = Suite(model=model, path=path, text=text)
    for device in ("cpu", "cuda") if expand else ():
        suite.cases(device)  # combination errors surface before anything runs
    return suite


def describe_validation_error(exc: ValidationError) -> str:
    """`field.path: problem; allowed: ...` with a did-you-mean:
    the first in full, the rest on the same line."""
    errors, seen = [], set()
    for error in sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden"):
        if _field_path(error["loc"]) not in seen:  # a union's branches report one field each
            seen.add(_field_path(error["loc"]))
            errors.append(error)
    first, rest = _describe_one(errors[0]), [_describe_one(e, allowed_list=False) for e in errors[1:]]
    return first + (f"; also {'; '.join(rest)}" if rest else "")


def _describe_one(error: Any, allowed_list: bool = True) -> str:
    loc = _field_path(error["loc"])
    kind = error["type"]
    value = error.get("input")
    if kind == "extra_forbidden":
        parent, key = loc.rpartition(".")[0], str(error["loc"][-1])
        allowed = _allowed_keys(error["loc"][:-1])
        where = parent + "." if parent else ""
        listed = f"; allowed: {', '.join(allowed)}" if allowed_list else ""
        return f"{where}{key}: unknown key{did_you_mean(key, allowed)}{listed}"
    if kind == "missing":
        return f"{loc}: required field is missing"
    if kind in ("model_type", "dict_type"):
        return f"{loc}: expected a mapping of keys to values, got a {type(value).__name__}"
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        allowed = list(expected.replace("'", "").replace(" or ", ", ").split(", "))
        return (f"{loc}: {value!r} is not allowed{did_you_mean(str(value), allowed)}; "
                f"allowed: {', '.join(allowed)}")
    if kind == "value_error":
        return f"{loc}: {error['msg'].removeprefix('Value error, ')}"
    return f"{loc}: {value!r}: {error['msg']}"


UNION_TAGS = ("int", "bool", "str", "none", "literal['heads']", "float")


def _field_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in UNION_TAGS or str(part).startswith("literal["):
            continue  # union-branch tags
        else:
            path += ("." if path else "") + str(part)
    return path or "(top level)"


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] = SuiteModel
    for part in loc:
        if isinstance(part, int):
            continue  # an item of `also`
        model = _model_in(model.model_fields[str(part)].annotation)
    return list(model.model_fields)


def _model_in(annotation: Any) -> type[BaseModel]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        try:
            return _model_in(arg)
        except StopIteration:
            continue
    raise StopIteration
