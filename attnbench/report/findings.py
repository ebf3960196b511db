"""The short "findings" a reader wants first, written from the data as plain-text sentences (escaped later)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from attnbench.core.peaks import beyond_words, times_words
from attnbench.core.units import fmt_bytes, fmt_float, fmt_length, fmt_ms
from attnbench.records.parts import Determinism, Implausibility
from attnbench.records.record import KEY_FIELDS, TIMED, WORKLOAD_DEFAULTS, Record, Status, apart
from attnbench.records.words import case_words, shape_words
from attnbench.report.baseline import group_speedups, usable_time
from attnbench.report.frontier import findings_lines
from attnbench.report.groups import CaseGroup
from attnbench.report.names import cause_of, short_kernel_name
from attnbench.report.rows import kernel_unchecked
from attnbench.stats.recommend import ran_kernel
from attnbench.stats.settling import unsettled

DOCUMENT_FIELDS = ("documents", "doc_lengths", "doc_lens", "doc_kv_lens")
# The fields that make two records the same case but for its documents.
CASE_KEYS = tuple(k for k in (*KEY_FIELDS, *WORKLOAD_DEFAULTS) if k != "backend" and k not in DOCUMENT_FIELDS)
MAX_GROUP_LINES = 12  # "fastest per length" lines; the tables hold every group
MAX_QUANTIZED_LINES = 16
SHOWN_CASES = 3  # cases named per failure line
MAX_DTYPE_LINES = 8
MAX_REPEAT_LINES = 8
DETERMINISTIC_SKIP = "deterministic asked"  # how a refusal's skip reason begins (attnbench.run.skip, run.measure)
OVERHEAD_REST = "the rest: "  # where an `overhead` text names the rest of the call (timing.profile.judge_kernels)


@dataclass
class Failure:
    """Records that failed the same way: one backend, one status, one reason, and the cases it hit."""

    backend: str
    status: str
    reason: str
    cases: list[str]
    every: bool = False  # the run's every case: nothing to name

    @property
    def cases_text(self) -> str:
        """How many cases, naming the first few, or that it was every case."""
        count = f"{len(self.cases)} case{'s' if len(self.cases) != 1 else ''}"
        if self.every and len(self.cases) > 1:
            return f"every case, {count}"
        shown = "; ".join(self.cases[:SHOWN_CASES])
        more = f"; … {len(self.cases) - SHOWN_CASES} more in the table" if len(self.cases) > SHOWN_CASES else ""
        return f"{count}: {shown}{more}"


@dataclass
class Cause:
    """Records of any backends that failed one way: one status, one reason without its shapes' numbers."""

    status: str
    reason: str
    backends: list[str]
    cases: list[str]
    count: int

    @property
    def cases_text(self) -> str:
        return Failure("", self.status, self.reason, self.cases).cases_text


def causes(records: list[Record], statuses: tuple[str, ...]) -> list[Cause]:
    """The records of `statuses` grouped by cause across backends, the commonest first."""
    grouped: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        if r.status in statuses:
            grouped.setdefault((str(r.status), cause_of(r.reason or "no reason recorded")), []).append(r)
    found = [Cause(status, reason, sorted({str(r.backend) for r in members}),
                   list(dict.fromkeys(case_words(r) for r in members)), len(members))
             for (status, reason), members in grouped.items()]
    return sorted(found, key=lambda c: (-c.count, c.status, c.reason))


@dataclass
class Findings:
    """What the report says up front; each list holds plain sentences."""

    fastest: list[str] = field(default_factory=list)
    speedup: list[str] = field(default_factory=list)
    memory: list[str] = field(default_factory=list)
    packing: list[str] = field(default_factory=list)  # packed documents against one sequence
    quantized: list[str] = field(default_factory=list)  # report.frontier's lines
    noisy: str | None = None  # how many timings are noisy, and why (first screen)
    noise: list[str] = field(default_factory=list)
    repeat: list[str] = field(default_factory=list)  # records whose two calls differed; what deterministic gave
    # flagged fastest lengths, then every record flagged `overhead`
    kernels: list[str] = field(default_factory=list)
    roofs: list[str] = field(default_factory=list)  # records above 100% of their roof
    dtype: list[str] = field(default_factory=list)  # cases whose dtype cannot hold their inputs
    failures: list[Failure] = field(default_factory=list)  # implausible, mismatch, error, wrong_kernel
    other_failures: list[Failure] = field(default_factory=list)  # oom, timeout, skipped
    counts: dict[str, int] = field(default_factory=dict)
    errors: list[Cause] = field(default_factory=list)  # mismatch, error, wrong_kernel, oom, timeout by cause
    skips: list[Cause] = field(default_factory=list)
    overhead: list[str] = field(default_factory=list)  # overhead_lines, also in `kernels`

    def summary_lines(self) -> list[str]:
        """Every sentence but the failures, in reading order."""
        return ([self.noisy] if self.noisy else []) + (
                self.roofs + self.fastest + self.speedup + self.memory + self.packing + self.quantized + self.noise
                + self.repeat + self.kernels + self.dtype)


def _ranges(winners: list[tuple[int, str]]) -> str:
    """Collapse consecutive lengths with the same winner: "sdpa-flash at 1K–4K, xformers at 8K"."""
    runs: list[tuple[str, int, int]] = []
    for x, name in winners:
        if runs and runs[-1][0] == name:
            runs[-1] = (name, runs[-1][1], x)
        else:
            runs.append((name, x, x))
    return ", ".join(f"{name} at {_span(first, last)}" for name, first, last in runs)


def _span(first: int, last: int) -> str:
    return fmt_length(first) if first == last else f"{fmt_length(first)}–{fmt_length(last)}"


def _spans(xs: list[int], every: list[int]) -> str:
    """The lengths timed, as one span when consecutive in the group ("256–512"), else "1K, 4K"."""
    start = every.index(xs[0])
    if every[start:start + len(xs)] == xs:
        return _span(xs[0], xs[-1])
    return ", ".join(fmt_length(x) for x in xs)


def _length_words(group: CaseGroup, x: int) -> str:
    return f"{'KV length' if group.x_field == 'kv_seq_len' else 'sequence length'} {x}"


def fastest_line(group: CaseGroup) -> str | None:
    """Which backend was fastest at each length of a group (ok results only), in one sentence."""
    cells = group.by_backend_x()
    winners: list[tuple[int, str]] = []
    for x in group.xs:
        timed = [(usable_time(r), b) for (b, xx), r in cells.items() if xx == x and usable_time(r) is not None]
        if timed:
            best = min(timed)
            kernel = ran_kernel(cells[(best[1], x)].kernel_id)  # backends that ran that kernel are one name
            same = sorted(b for _, b in timed if kernel and ran_kernel(cells[(b, x)].kernel_id) == kernel)
            winners.append((x, " = ".join(same) if len(same) > 1 else best[1]))
    if not winners:
        return f"{group.title()}: no backend produced a correct timing."
    timed_backends = {b for (b, _), r in cells.items() if usable_time(r) is not None}
    if len(timed_backends) == 1:  # "fastest" of one says nothing was compared
        spans = _spans([x for x, _ in winners], list(group.xs))
        return f"{group.title()}: only {next(iter(timed_backends))} has a correct timing ({spans})."
    only = {name for _, name in winners}
    if len(only) == 1 and len(winners) == len(group.xs) and len(winners) > 1:
        span = f"{fmt_length(group.xs[0])}–{fmt_length(group.xs[-1])}"
        return f"{group.title()}: {next(iter(only))} is fastest at every length ({span})."
    return f"{group.title()}: fastest {_ranges(winners)}."


def flagged_fastest_lines(groups: list[CaseGroup]) -> list[str]:
    """Each length where the fastest backend's time is not its attention kernel's alone: the fastest ok record is
    flagged `overhead`, or a `wrong_kernel` record was faster than every ok one."""
    lines = []
    for group in groups:
        cells = group.by_backend_x()
        for x in group.xs:
            here = [(b, r) for (b, xx), r in sorted(cells.items()) if xx == x and r.time_ms]
            ok = [(usable_time(r), b, r) for b, r in here if usable_time(r) is not None]
            best = min(ok, key=lambda item: item[0]) if ok else None
            where = f"{group.title()}: fastest at {_length_words(group, x)}"
            if best is not None and best[2].overhead:
                _, backend, r = best
                share = r.attention_share
                outside = f"{1 - share:.0%} of its call is" if share is not None else "part of its call is"
                rest = short_rest(str(r.overhead).partition(OVERHEAD_REST)[2]) or str(r.overhead)
                lines.append(f"{where}: {backend}, but {outside} outside its attention kernels ({rest}).")
            wrong = [(float(r.time_ms), b, r) for b, r in here if r.status == Status.WRONG_KERNEL]
            if wrong and (best is None or min(wrong, key=lambda item: item[0])[0] < best[0]):
                _, backend, r = min(wrong, key=lambda item: item[0])
                lines.append(f"{group.title()}: at {_length_words(group, x)} the fastest timing is {backend}'s, but "
                             f"it ran the wrong kernel ({r.reason or 'no reason recorded'}): that time is "
                             f"not {backend}'s.")
    return lines


def _group_failures(records: list[Record], statuses: tuple[str, ...]) -> list[Failure]:
    grouped: dict[tuple[str, str, str], list[str]] = {}
    every = {case_words(r) for r in records}
    for r in records:
        if r.status in statuses:
            key = (str(r.backend), str(r.status), str(r.reason or "no reason recorded"))
            grouped.setdefault(key, []).append(case_words(r))
    return [Failure(b, s, reason, cases, set(cases) == every) for (b, s, reason), cases in sorted(grouped.items())]


def implausible_failures(records: list[Record]) -> list[Failure]:
    """The implausible records, one Failure per backend and cause (device, dtype, the roofs passed, the verdict
    replaced), whose reason spans how far over each roof they read."""
    grouped: dict[tuple[str, str, str, tuple[str, ...], str], list[Record]] = {}
    for r in records:
        if r.status == Status.IMPLAUSIBLE:
            found = r.implausible or Implausibility()
            key = (str(r.backend), str(r.device_name), str(r.dtype), tuple(found.roofs()), str(found.was or ""))
            grouped.setdefault(key, []).append(r)
    every = {case_words(r) for r in records}
    failures = []
    for (backend, device_name, dtype, kinds, was), members in sorted(grouped.items()):
        read = [r.implausible.roofs() for r in members if r.implausible]
        spans = {k: times_words(min(roofs[k] for roofs in read), max(roofs[k] for roofs in read)) for k in kinds}
        what = "these timings are" if len(members) > 1 else "the timing is"
        words = beyond_words(device_name, dtype, spans.get("compute"), spans.get("memory"), what) if kinds else None
        reason = (f"{words}, never ranked" + (f"; each was {was} too (reasons in the table)" if was else "")
                  if words else str(members[0].reason or "no reason recorded"))
        cases = [case_words(r) for r in members]
        failures.append(Failure(backend, str(Status.IMPLAUSIBLE), reason, cases, set(cases) == every))
    return failures


def repeat_lines(records: list[Record]) -> list[str]:
    """The compared records that were not repeatable, and what the backends made of a deterministic request."""
    compared = [r for r in records if r.repeatable is not None]
    differed = [r for r in compared if r.unrepeatable]
    lines = []
    if differed:
        lines.append(f"{len(differed)} of {len(compared)} compared measurements were not repeatable: two calls on the "
                     "same inputs gave different bits (≠ after the status in the tables).")
    for r in differed[:MAX_REPEAT_LINES]:
        checked = r.checked
        diff = checked.repeat_max_diff
        size = f"by up to {fmt_float(diff, 2)}" if diff is not None else "by a NaN or Inf in one call only"
        lines.append(f"Not repeatable: {r.backend} on {case_words(r)}: {checked.repeat_tensor} differs "
                     f"{size} between two calls.")
    if len(differed) > MAX_REPEAT_LINES:
        lines.append(f"… and {len(differed) - MAX_REPEAT_LINES} more not repeatable (≠ in the tables).")
    answers = [r.determinism for r in records]
    refused = sum(1 for r in records if str(r.reason or "").startswith(DETERMINISTIC_SKIP))
    if refused or any(a is not None and a.reason for a in answers):
        honoured = sum(a is not None and a.kind == Determinism.HONOURED for a in answers)
        lacking = sum(a is not None and a.kind == Determinism.NOT_APPLICABLE for a in answers)
        lines.append(f"Deterministic kernels were asked for: {honoured} measurements honoured it, {lacking} needed "
                     f"nothing (no atomics, or forward only), {refused} were skipped: the backend or PyTorch refused.")
    return lines


MAX_PACKING_LINES = 8
MAX_ROOF_LINES = 8  # records above their roof named one by one; the tables show every percent


def roof_lines(records: list[Record]) -> list[str]:
    """Every timed record above 100% of its roof (extra.above_roof): no kernel outruns the machine, so the roof is
    wrong."""
    above = [r for r in records if r.status in TIMED and r.roof.above_roof]
    lines = []
    for r in above[:MAX_ROOF_LINES]:
        source = str(r.roof.peak_source or "its roof")
        why = ("measured under load, or on too small a matmul: re-run on a quiet machine, or give --peak-tflops"
               if source.startswith("measured roof") else "that roof is below what this device reached")
        lines.append(f"Above its roof: {r.backend} on {case_words(r)} reached {float(r.percent_of_peak):.0f}% "
                     f"of {source}; the roof is wrong ({why}).")
    if len(above) > MAX_ROOF_LINES:
        lines.append(f"… and {len(above) - MAX_ROOF_LINES} more records above their roof (% of peak in the tables).")
    return lines


def dtype_lines(records: list[Record]) -> list[str]:
    """Each case whose dtype cannot hold its inputs (extra.dtype_limited): naive in the case's dtype is far off the
    float64 reference, so each backend's error is given as a share of the reference's scale."""
    cases: dict[str, list[Record]] = {}
    for r in records:
        if r.status in TIMED and r.checked.dtype_limited:
            cases.setdefault(str(r.case_id), []).append(r)
    lines = []
    for members in list(cases.values())[:MAX_DTYPE_LINES]:
        naive, scale = members[0].checked.naive_relative_error, members[0].checked.reference_scale
        errors = ", ".join(f"{r.backend} {100 * float(r.max_abs_error) / scale:.2g}%" for r in members
                           if scale and r.max_abs_error is not None)
        off = "NaN or Inf" if naive is None else f"off by {100 * naive:.0f}% of the reference's scale"
        lines.append(f"The dtype cannot hold these inputs ({case_words(members[0])}): naive attention in "
                     f"{members[0].dtype} is {off}, so a pass there says little"
                     + (f"; each backend's error as a share of that scale: {errors}." if errors else "."))
    if len(cases) > MAX_DTYPE_LINES:
        lines.append(f"… and {len(cases) - MAX_DTYPE_LINES} more cases the dtype cannot hold (extra.dtype_limited).")
    return lines


def packing_lines(timed: list[Record]) -> list[str]:
    """Each backend's time on packed documents against one sequence of the same case, where the intervals are apart."""
    def key(r: Record) -> tuple:
        return tuple(str(getattr(r, k)) for k in CASE_KEYS)

    single = {(r.backend, key(r)): r for r in timed if r.status == Status.OK and not r.documents}
    lines = []
    for r in timed:
        if r.status != Status.OK or not r.documents:
            continue
        one = single.get((r.backend, key(r)))
        if one is None:
            continue
        packed, single_ci = r.interval, one.interval
        if packed is not None and single_ci is not None and not apart(packed, single_ci):
            continue  # no measurable difference: not a finding
        ratio = float(one.time_ms) / float(r.time_ms)
        how = f"{ratio:.1f}× faster" if ratio >= 1 else f"{1 / ratio:.1f}× slower"
        lines.append(f"Packed documents: {r.backend} on {r.documents} documents ({r.doc_lengths}) at "
                     f"{fmt_length(r.seq_len)} tokens takes {fmt_ms(usable_time(r))} ms, {how} than on one "
                     f"{fmt_length(r.seq_len)}-token sequence ({fmt_ms(usable_time(one))} ms); "
                     f"{' · '.join(shape_words(one))}.")
    return lines[:MAX_PACKING_LINES]


def noisy_line(timed: list[Record]) -> str | None:
    """How many timings are noisy and why (stats.settling), or, without windows, how many."""
    found = unsettled(timed)
    if found is not None:
        return found.line()
    noisy = sum(1 for r in timed if r.noisy)
    return (f"{noisy} of {len(timed)} timings are noisy (interval wider than the precision asked, or too few "
            "samples for one): marked ~ in the tables and drawn hollow.") if noisy else None


def noise_lines(timed: list[Record]) -> list[str]:
    """How many timings were taken on a throttled or shared GPU."""
    lines = []
    throttled = sum(1 for r in timed if r.throttled)
    if throttled:
        lines.append(f"{throttled} of {len(timed)} timings were taken on a throttled or shared GPU (heat or "
                     "power slowed its clock, or another process was on it: extra.clock_event_reasons, "
                     "extra.other_gpu_processes): marked ! in the tables and drawn hollow; compare does not "
                     "judge them.")
    return lines


def fastest_lines(groups: list[CaseGroup]) -> list[str]:
    lines = [line for line in (fastest_line(g) for g in groups) if line]
    more = [f"… and {len(lines) - MAX_GROUP_LINES} more case groups (see the tables)."] \
        if len(lines) > MAX_GROUP_LINES else []
    return lines[:MAX_GROUP_LINES] + more


def speedup_line(groups: list[CaseGroup], baseline: str | None) -> str:
    """The largest speed-up over the baseline, or why there is none."""
    best: tuple[float, str, CaseGroup, int] | None = None
    for group in groups:
        for (backend, x), value in group_speedups(group, baseline).items():
            if backend != baseline and (best is None or value > best[0]):
                best = (value, backend, group, x)
    if best is not None:
        value, backend, group, x = best
        return (f"Largest speed-up over {baseline}: {backend} is {value:.2f}× faster on {group.title()} "
                f"at {_length_words(group, x)}.")
    if baseline is None:
        return "No speed-up is given: neither sdpa-math nor naive ran ok (choose a baseline)."
    return f"No other backend has a correct timing next to {baseline} on the same case."


def _memory_word(backend: str, r: Record) -> str | None:
    if r.status in TIMED:
        return f"{backend} {fmt_bytes(r.peak_memory_bytes)}" if r.peak_memory_bytes is not None \
            else f"{backend} not measured"
    if r.status != Status.SKIPPED:  # an oom here is the finding; skips are listed below
        return f"{backend} {r.status}"
    return None


def memory_lines(groups: list[CaseGroup]) -> list[str]:
    """Each backend's peak memory at the longest length of the group that reaches furthest."""
    if not groups:
        return []
    longest = max(groups, key=lambda g: (g.xs[-1], len(g.records)))
    x = longest.xs[-1]
    words = (_memory_word(backend, r) for (backend, xx), r in sorted(longest.by_backend_x().items()) if xx == x)
    parts = [w for w in words if w is not None]
    return [f"Peak memory at the longest length ({_length_words(longest, x)}, {longest.title()}): "
            + "; ".join(parts) + "."]


def kernel_lines(groups: list[CaseGroup], records: list[Record]) -> list[str]:
    """Lengths whose fastest backend is flagged, backends with overhead, and unchecked kernels."""
    flagged = flagged_fastest_lines(groups)
    more = [f"… and {len(flagged) - MAX_GROUP_LINES} more lengths whose fastest backend is flagged (see the tables)."] \
        if len(flagged) > MAX_GROUP_LINES else []
    return flagged[:MAX_GROUP_LINES] + more + overhead_lines(records) + unchecked_lines(records)


def build_findings(groups: list[CaseGroup], records: list[Record], baseline: str | None) -> Findings:
    """Fastest backend per length, the largest speed-up over the baseline, memory at the longest length, failures."""
    found = Findings()
    for r in records:
        found.counts[r.status] = found.counts.get(r.status, 0) + 1
    timed = [r for r in records if r.status in TIMED and r.time_ms is not None]
    found.noisy = noisy_line(timed)
    found.noise = noise_lines(timed)
    found.fastest = fastest_lines(groups)
    found.speedup = [speedup_line(groups, baseline)]
    found.memory = memory_lines(groups)
    found.packing = packing_lines(timed)
    found.roofs = roof_lines(records)
    found.dtype = dtype_lines(records)
    found.repeat = repeat_lines(records)
    found.quantized = findings_lines(records)[:MAX_QUANTIZED_LINES]
    found.kernels = kernel_lines(groups, records)
    found.failures = implausible_failures(records) + _group_failures(records, ("mismatch", "error", "wrong_kernel"))
    found.other_failures = _group_failures(records, ("oom", "timeout", "skipped"))
    found.errors = causes(records, ("mismatch", "error", "wrong_kernel", "oom", "timeout"))
    found.skips = causes(records, ("skipped",))
    found.overhead = overhead_lines(records)
    return found


def overhead_lines(records: list[Record]) -> list[str]:
    """One line per backend flagged `overhead`: how many, its kernels' share, and what the rest of the call was."""
    by: dict[str, list[Record]] = {}
    for r in records:
        if r.overhead:
            by.setdefault(str(r.backend), []).append(r)
    lines = []
    for backend, flagged in sorted(by.items()):
        shares = [r.attention_share for r in flagged if r.attention_share is not None]
        share = (f"; its declared kernels {min(shares):.0%}–{max(shares):.0%} of the call" if len(set(shares)) > 1
                 else f"; its declared kernels {shares[0]:.0%} of the call" if shares else "")
        rests: dict[str, int] = {}
        for r in flagged:
            for part in rest_parts(str(r.overhead).partition(OVERHEAD_REST)[2].rstrip(".")):
                found = re.fullmatch(r"(.+) \d+%( \([^()]+\))?", part)  # "aten::copy_ 16% (copy)": name and kind
                name = short_kernel_name(found[1]) + (found[2] or "") if found else part
                if name:
                    rests[name] = rests.get(name, 0) + 1
        common = sorted(rests, key=lambda n: -rests[n])[:3]
        total = sum(1 for r in records if r.backend == backend and r.kernels)
        lines.append(f"{backend}: overhead in {len(flagged)} of {total} profiled records{share}"
                     + (f"; the rest most often {', '.join(common)}" if common else "") + ".")
    return lines


def rest_parts(text: str) -> list[str]:
    """An overhead's "the rest" split at its commas outside brackets (a C++ kernel name holds commas)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "<({[" :
            depth += 1
        elif char in ">)}]" and not (char == ">" and text[i - 1:i] == "-"):
            depth = max(0, depth - 1)
        elif depth == 0 and text.startswith(", ", i):
            parts.append(text[start:i])
            start = i + 2
    return [p for p in [*parts, text[start:]] if p]


def short_rest(text: str) -> str:
    """An overhead's "the rest" with each kernel's name shortened (names.short_kernel_name)."""
    parts = []
    for part in rest_parts(text.rstrip(".")):
        found = re.fullmatch(r"(.+)( \d+%(?: \([^()]+\))?)", part)
        parts.append(short_kernel_name(found[1]) + found[2] if found else part)
    return ", ".join(parts)


def unchecked_lines(records: list[Record], most: int = 5) -> list[str]:
    """One line per reason kernels were never checked, naming each backend with how many records."""
    by: dict[str, dict[str, int]] = {}
    for r in records:
        why = kernel_unchecked(r)
        if why:
            counts = by.setdefault(why, {})
            counts[str(r.backend)] = counts.get(str(r.backend), 0) + 1
    measured: dict[str, int] = {}
    for r in records:
        if r.status in TIMED:
            measured[str(r.backend)] = measured.get(str(r.backend), 0) + 1
    ordered = sorted(by.items(), key=lambda item: (-sum(item[1].values()), item[0]))
    return [f"Kernels unchecked ({why}): "
            + ", ".join(f"{b} {n} of {measured.get(b, n)}" for b, n in sorted(counts.items())) + "."
            for why, counts in ordered[:most]]
