"""Match: one measurement present in both runs of a comparison."""

from __future__ import annotations

from dataclasses import dataclass

from attnbench.core.units import fmt_ms
from attnbench.records.record import apart


@dataclass
class Match:

    key: tuple
    backend: str
    case: str
    base_status: str
    new_status: str
    base_ms: float | None
    new_ms: float | None
    base_iqr: float
    new_iqr: float
    new_reason: str | None = None
    base_noisy: bool = False
    new_noisy: bool = False
    base_throttled: bool = False  # timed on a throttled or shared GPU (the record's `throttled`)
    new_throttled: bool = False
    base_ci: tuple[float, float] | None = None
    new_ci: tuple[float, float] | None = None
    base_repeatable: bool | None = None  # the record's `repeatable`: None where not compared
    new_repeatable: bool | None = None
    new_deterministic: bool = False  # NEW asked for deterministic kernels (extra.deterministic)
    new_repeat: str = ""  # NEW's difference between its two calls, in words
    kernel_change: str | None = None  # "X now runs K; no longer K'" (change_rule.kernel_change)

    @property
    def noisy(self) -> bool:
        """Either side is a record without an interval whose samples spread wide: never judged."""
        return self.base_noisy or self.new_noisy

    def noise_words(self) -> str:  # "base", "new" or "base and new"
        return " and ".join(side for side, flag in (("base", self.base_noisy), ("new", self.new_noisy)) if flag)

    @property
    def throttled(self) -> bool:  # either side timed on a throttled or shared GPU: shown, never judged
        return self.base_throttled or self.new_throttled

    def throttle_words(self) -> str:  # likewise
        return " and ".join(side for side, flag in (("base", self.base_throttled), ("new", self.new_throttled))
                            if flag)

    def unjudged_note(self) -> str:
        """' (noisy: new; throttled GPU: base)', or '' for a match that is judged."""
        parts = ([f"noisy: {self.noise_words()}"] if self.noisy else []) + \
            ([f"throttled GPU: {self.throttle_words()}"] if self.throttled else [])
        return f" ({'; '.join(parts)})" if parts else ""

    @property
    def ratio(self) -> float | None:
        if self.base_status == "ok" and self.new_status == "ok" and self.base_ms and self.new_ms:
            return self.new_ms / self.base_ms
        return None

    def beyond_noise(self, pace: float = 1.0) -> bool:
        """Whether the two medians are told apart, NEW's divided by `pace`: intervals apart, or without intervals
        more than the two IQRs."""
        assert self.base_ms is not None and self.new_ms is not None
        if self.base_ci is not None and self.new_ci is not None:
            return apart((self.new_ci[0] / pace, self.new_ci[1] / pace), self.base_ci)
        return abs(self.new_ms / pace - self.base_ms) > self.base_iqr + self.new_iqr / pace

    def ratio_words(self, pace: float = 1.0) -> str:
        """'1.031×' (with ', 0.953× of the pace' when judged against one), or '' when either side did not run ok."""
        if self.ratio is None:
            return ""
        return f"{self.ratio:.3f}×" + (f" ({self.ratio / pace:.3f}× of the pace)" if pace != 1.0 else "")

    def side(self, which: str) -> str:
        """One side's median with its interval (or ±IQR for a record without one), or its status."""
        ms, iqr, ci, status = ((self.base_ms, self.base_iqr, self.base_ci, self.base_status) if which == "base"
                               else (self.new_ms, self.new_iqr, self.new_ci, self.new_status))
        if status != "ok":
            return status
        if ci is not None:
            return f"{fmt_ms(ms)} [{fmt_ms(ci[0])}, {fmt_ms(ci[1])}]"
        return f"{fmt_ms(ms)} ±{fmt_ms(iqr)}"
