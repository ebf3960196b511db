"""A traffic's cost as Markdown (`recommend --mix`): stats.mix weighs it."""

from __future__ import annotations

from attnbench.stats.mix import MixResult, Span
from attnbench.sweep.mix import PHASES


def _span(span: Span, unit: float = 1.0, digits: int = 3) -> str:
    return (f"{span.value * unit:.{digits}g} [{span.low * unit:.{digits}g}, {span.high * unit:.{digits}g}]")


def to_markdown(result: MixResult) -> str:
    """The mix's section: a row per single backend and one for the dispatch, the gain, and what is missing."""
    t = result.traffic
    lines = [f"## The traffic of {result.suite}", "",
             f"{len(t.batches)} batches ({t.requests:g} requests, {t.tokens:g} query tokens, weighted) as "
             f"{len(t.parts)} parts ({len(t.cases)} cases). Time per request in ms and per query token in µs, each "
             "with the sums of the parts' interval ends.", "",
             "| serving | ms per request [interval] | µs per token [interval] | prefill share | decode share | "
             "parts missing |", "|---|---|---|---|---|---|"]
    for total in [*result.totals, result.dispatch]:
        name = ("**dispatch** (recommend's table per shape)" if total is result.dispatch else
                f"`{total.name}` (flagged overhead)" if total.name in result.flagged else f"`{total.name}`")
        if total.complete:
            cells = [_span(result.per_request(total)), _span(result.per_token(total), 1e3),
                     f"{total.share('prefill'):.0%}", f"{total.share('decode'):.0%}", "0"]
        else:
            cells = ["—", "—", "—", "—", str(len(total.missing))]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", *_verdict(result), ""]
    return "\n".join(lines)


def _best_line(result: MixResult) -> list[str]:
    """The best single backend and the dispatch's gain over it."""
    best, gain = result.best, result.gain
    if best is None:
        return ["- No single backend has a clean number on every part of the traffic."]
    if gain is None:
        return []
    if set(result.dispatch.calls.values()) == {best.name}:
        return [f"- The dispatch calls `{best.name}`, the best single backend, on every part: no gain."]
    return [f"- Best single backend: `{best.name}`; the dispatch is {gain.value:.3g}× faster than it "
            f"[{gain.low:.3g}, {gain.high:.3g}]" + (" (the interval holds 1: not told apart)."
                                                    if gain.low <= 1 <= gain.high else ".")]


def _phase_lines(result: MixResult) -> list[str]:
    """The fastest clean backend on each phase's parts alone."""
    lines = []
    for phase in PHASES:
        ranked = sorted((t for t in result.totals if phase in t.phases and t.name not in result.flagged and not any(
            p.case.case_id in t.missing for p in result.traffic.parts if p.phase == phase)),
            key=lambda t: t.phases[phase].value)
        if ranked:
            span = ranked[0].phases[phase].over(result.traffic.requests)
            lines.append(f"- Fastest on the {phase} parts alone: `{ranked[0].name}`, {_span(span)} ms per request.")
    return lines


def _verdict(result: MixResult) -> list[str]:
    lines = _best_line(result) + _phase_lines(result)
    called = sorted(set(result.dispatch.calls.values()))
    lines.append(f"- The dispatch calls {', '.join(f'`{b}`' for b in called) or 'nothing'}.")
    if result.dispatch.fallback:
        lines.append(f"- On {len(result.dispatch.fallback)} part(s) recommend's table calls nothing (unsettled or "
                     "none): the dispatch takes the fastest clean median there: "
                     + ", ".join(f"`{c}`" for c in result.dispatch.fallback) + ".")
    if result.unmeasured:
        lines.append("- No backend measured: " + ", ".join(f"`{c}`" for c in result.unmeasured)
                     + "; every total above leaves them out and is not shown.")
    if result.flagged:
        lines.append(f"- {', '.join(f'`{b}`' for b in result.flagged)}: timed only with an overhead flag (declared "
                     "kernels under the threshold of the call): what its user pays, never called by the dispatch.")
    for total in result.totals:
        if not total.complete:
            lines.append(f"- `{total.name}` has no clean number on {len(total.missing)} of {len(result.traffic.cases)}"
                         f" cases (e.g. `{total.missing[0]}`).")
    return lines
