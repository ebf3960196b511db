"""The measurement policy, declared once; the texts that state it are made from these values."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class DevicePolicy:
    """Noise figures are standard deviations of log times (docs/verdicts.md)."""

    precision: float
    rounds: int
    refine: float
    window_noise: float  # one window's median around the run's
    run_noise: float  # a run's median around the long run's
    pace_noise: float  # two identical runs' median NEW/BASE around 1
    ratio_noise: float  # one log ratio around the pace
    probe_noise: float | None  # None: no probe
    backend_noise: float  # one backend's mean log ratio around the pace
    evidence: str


DEVICES: dict[str, DevicePolicy] = {
    "cpu": DevicePolicy(
        precision=0.10, rounds=3, refine=1.0, window_noise=0.106, run_noise=0.0896, pace_noise=0.0963,
        ratio_noise=0.0707, probe_noise=0.0505, backend_noise=0.0313,
        evidence="a 2-core AMD EPYC VM, quick's 64 measurements (reports/cpu-AMD-EPYC-2core-verdicts/): window and "
                 "run noise from 11 identical runs spread over 15 minutes (compare-3); pace, ratio and backend "
                 "noise from 30 identical runs spread over three batches (compare-1, compare-2, calibration-2); "
                 "probe noise from calibration-2's 8 runs, 20 s apart"),
    "cuda": DevicePolicy(
        precision=0.01, rounds=1, refine=0.0, window_noise=0.0, run_noise=0.0017, pace_noise=0.0002,
        ratio_noise=0.0025, probe_noise=None, backend_noise=0.005,
        evidence="4 committed H200 runs, 53 measurements in all four (reports/NVIDIA-H200-*; one window each)"),
}

FALLBACK_DEVICE = "cuda"  # for a device the table does not name
CONFIDENCE = 0.95
PRIOR_WINDOWS = 4
PRIOR_RATIOS = 8
NOISE_THRESHOLD = 0.10  # IQR share that makes a record without an interval noisy
CHANGE_THRESHOLD = 0.10  # asv's default factor
AB_THRESHOLD = 0.05  # a paired A/B's smallest change: interleaved rounds cancel the drift compare must allow
FAMILY_ALPHA = 0.05  # Bonferroni-corrected
MIN_BACKEND_CASES = 3
# CUDA events beside the host's time per call (attnbench.timing.bracket), not fitted: events that saw under a tenth
# of the host's time saw little of the call; within twice an empty pair's time they bracketed nothing.
EVENTS_SHARE = 0.10
EMPTY_PAIR_FACTOR = 2.0
# A blocking call whose events saw over this many times the host's time returned before its work was done.
EARLY_RETURN_FACTOR = 2.0
# A timing over this many times its GPU's datasheet roof is a broken measurement (status implausible): INT8 inside,
# fp16 accumulation, a boost clock and an output in L2 add about 3× at worst (docs/verdicts.md).
PLAUSIBLE_MARGIN = 4.0
# declared kernels under this share of the call: `overhead` (docs/results.md "Which kernel ran")
OVERHEAD_SHARE = 0.80
# naive's error share above which the dtype cannot hold the inputs' arithmetic
DTYPE_LIMITED = 0.1
# a backend's error bound: ERROR_FACTOR × naive's + the dtype's floor (verify/check.py)
ERROR_FACTOR = 2.0
ERROR_FLOOR = {"float32": 1e-5, "float16": 1e-4, "bfloat16": 1e-3}
# two modes: a gap over MODE_GAP of the median, with MODE_SHARE (and two) on each side
MODE_GAP = 0.15
MODE_SHARE = 0.10
# Skipped untried when the analytic estimate exceeds free device memory by this factor.
MEMORY_SKIP_FACTOR = 2.0
# Energy per call has no interval: it is taken as known to the counter's resolution (attnbench.timing.energy).
ENERGY_RESOLUTION = 0.10


def device(name: str) -> DevicePolicy:
    return DEVICES.get(name, DEVICES[FALLBACK_DEVICE])


def z(confidence: float = CONFIDENCE) -> float:
    return statistics.NormalDist().inv_cdf(0.5 + confidence / 2)


def t_quantile(df: float, confidence: float = CONFIDENCE) -> float:
    """Cornish-Fisher to 1/df²: within 0.3% from df 3 up."""
    q = z(confidence)
    if not math.isfinite(df):
        return q
    return q + (q ** 3 + q) / (4 * df) + (5 * q ** 5 + 16 * q ** 3 + 3 * q) / (96 * df ** 2)


def run_to_run_noise(name: str, confidence: float = CONFIDENCE) -> float:
    policy = device(name)
    return math.expm1(z(confidence) * math.hypot(policy.window_noise, policy.run_noise))


def percent(value: float) -> str:
    return f"{value * 100:.3g}%"


def precision_words() -> str:
    names = {"cpu": "a CPU", "cuda": "a GPU"}
    return ", ".join(f"±{percent(p.precision)} on {names.get(d, d)}" for d, p in DEVICES.items())


def timing_words() -> str:
    return (f"Times are the median of the raw samples, in milliseconds per call, taken in windows (rounds) spread "
            f"over the run: a window's sampling stops once its samples' {percent(CONFIDENCE)} interval is within the "
            f"precision the suite asks (timing.precision; by default {precision_words()}), or its budget runs out "
            "(the record's stop field says which). The interval is the run's, at "
            f"{percent(CONFIDENCE)}: the spread of the windows' medians pooled with the device's window noise, plus "
            "the device's run-to-run noise that no window of one run sees (docs/verdicts.md); it is the shaded band "
            "in the latency chart and the interval column in the table. A noisy measurement — the windows' part of its "
            "interval wider than the precision asked, or, for a record written before intervals, an IQR (75th − 25th "
            f"percentile) over {percent(NOISE_THRESHOLD)} of its median — is drawn with a hollow marker and its median "
            "has a ~ in front. compare calls a change a regression when it exceeds the threshold "
            f"({percent(CHANGE_THRESHOLD)} by default) and the run-to-run noise and the two intervals do not overlap; "
            "a slowdown of the kernels' pace beyond what identical runs differ by (over the machine's own pace, where "
            "a CPU run timed it) fails it too, and names the backends that moved with it.")


def noisy_words() -> str:
    return (f"~ marks a noisy one: the windows' part of its interval wider than the precision asked, or, written "
            f"before intervals, its IQR over {percent(NOISE_THRESHOLD)} of the median")


def policy_table() -> str:
    lines = ["| device | precision | rounds | refine | window noise | run noise | pace noise | probe noise "
             "| ratio noise | backend noise | measured on |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, p in DEVICES.items():
        probe = percent(p.probe_noise) if p.probe_noise is not None else "no probe"
        lines.append(f"| {name} | ±{percent(p.precision)} | {p.rounds} | {p.refine:g} | {percent(p.window_noise)} "
                     f"| {percent(p.run_noise)} | {percent(p.pace_noise)} | {probe} | {percent(p.ratio_noise)} "
                     f"| {percent(p.backend_noise)} | {p.evidence} |")
    lines += ["", f"Intervals are stated at {percent(CONFIDENCE)}; compare judges changes of at least "
                  f"{percent(CHANGE_THRESHOLD)} (unless asked otherwise) with a {percent(FAMILY_ALPHA)} chance per "
                  f"rule that two identical runs raise one; a backend's across-the-board shift needs "
                  f"{MIN_BACKEND_CASES} matched cases; priors weigh {PRIOR_WINDOWS} windows and {PRIOR_RATIOS} ratios. "
                  f"A GPU timing over {PLAUSIBLE_MARGIN:g}× its datasheet's compute or bandwidth roof is "
                  "`implausible`: a broken measurement, never ranked."]
    return "\n".join(lines)


def bracket_words() -> str:
    """The rule that judges a CUDA record's events against its host time, as docs/conventions.md states it."""
    return (f"A call whose events saw under {percent(EVENTS_SHARE)} of the host's time per call is judged. Declared "
            "to run in its own runtime, its record notes it in `extra.off_stream` (the time is the host's). "
            f"Undeclared, with its events within {EMPTY_PAIR_FACTOR:g}x an empty pair's time, the events bracketed "
            "nothing: the record is `error` (integrity), both times in its reason, and its backend is to declare "
            "`Capabilities(runs_on=\"own-runtime\")`. Declared, with its events over "
            f"{EARLY_RETURN_FACTOR:g}x the host's time, the call returned before its work on torch's stream was done "
            "and the host's clock missed it: an integrity `error` too.")
