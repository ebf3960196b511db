"""The measurement policy: every threshold a record, a comparison or a recommendation is judged by, declared once.

The suite's schema, the sampler, the interval of a record, `compare` and `recommend` read these values, and every text
that states one (the report's legend, the Markdown summary, `--help`, docs/verdicts.md) is made from them by the
functions below, so a change here changes what is done and what is said together. The noise figures were measured
on committed batches of real runs (`evidence`); docs/verdicts.md says how, and how they were validated.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class DevicePolicy:
    """What one kind of device is asked and what it repeats. Noise figures are standard deviations of log times."""

    # The half-width a measurement is sampled to: each window's sampler stops there, and a record is `noisy` when the
    # part of its interval more windows would narrow is still wider.
    precision: float
    # The windows (rounds) a measurement's samples are taken in, spread over the run, when the suite sets none.
    rounds: int
    # The suite-level budget after the rounds, as a share of every measurement's budget together, spent re-timing
    # the measurements still wider than the precision.
    refine: float
    # How far one window's median wanders from the run's median of the same measurement: the prior a record's own
    # windows are pooled with (0 where one window's samples are the whole of it).
    window_noise: float
    # How far a run's median wanders from the long-run median in a way no window of the run sees: another process,
    # another state of the machine. Every record's interval carries it.
    run_noise: float
    # How far the pace (the median NEW/BASE ratio) of two identical runs wanders from 1.
    pace_noise: float
    # How far one measurement's log ratio wanders around the pace between two identical runs: the prior of the spread
    # compare judges each ratio against.
    ratio_noise: float
    # How far the kernels' pace over the machine's own (attnbench.run.pace_probe) wanders from 1 between two identical
    # runs that both timed it; None where runs time no probe (compare then judges the pace by pace_noise alone).
    probe_noise: float | None
    # How far one backend's mean log ratio wanders from the pace between two identical runs, beyond what its cases'
    # own spread explains.
    backend_noise: float
    # Where the noise figures come from.
    evidence: str


DEVICES: dict[str, DevicePolicy] = {
    "cpu": DevicePolicy(
        precision=0.10, rounds=3, refine=1.0, window_noise=0.1154, run_noise=0.0354, pace_noise=0.0963,
        ratio_noise=0.0707, probe_noise=0.0505, backend_noise=0.0313,
        evidence="a 2-core AMD EPYC VM, quick's 64 measurements (reports/cpu-AMD-EPYC-2core-verdicts/): window and "
                 "run noise from 6 idle runs back to back (calibration); pace, ratio and backend noise from 30 "
                 "identical runs spread over three batches (compare-1, compare-2, calibration-2); probe noise from "
                 "calibration-2's 8 runs, 20 s apart"),
    "cuda": DevicePolicy(
        precision=0.01, rounds=1, refine=0.0, window_noise=0.0, run_noise=0.0017, pace_noise=0.0002,
        ratio_noise=0.0025, probe_noise=None, backend_noise=0.005,
        evidence="4 committed H200 runs, 53 measurements in all four (reports/NVIDIA-H200-*; one window each)"),
}

# The confidence every interval is stated at.
CONFIDENCE = 0.95
# The weight, in windows, of the device's window noise against a record's own windows; and in ratios, of the
# device's ratio noise against a comparison's own: a few windows or matches lean on the device, many on themselves.
PRIOR_WINDOWS = 4
PRIOR_RATIOS = 8
# A record written before intervals existed is noisy when its IQR is over this share of its median.
NOISE_THRESHOLD = 0.10
# The smallest change compare judges (asv's default factor), unless asked otherwise.
CHANGE_THRESHOLD = 0.10
# The chance that two identical runs get a change called, per rule (one measurement, one backend across the board,
# the pace): Bonferroni-corrected for how many are judged at once.
FAMILY_ALPHA = 0.05
# The fewest matched cases of a backend for its across-the-board shift to be judged.
MIN_BACKEND_CASES = 3


def device(name: str) -> DevicePolicy:
    """The policy of a device ("cpu", "cuda"); an unknown device is held to a GPU's."""
    return DEVICES.get(name, DEVICES["cuda"])


def z(confidence: float = CONFIDENCE) -> float:
    """The two-sided standard normal quantile for `confidence`."""
    return statistics.NormalDist().inv_cdf(0.5 + confidence / 2)


def t_quantile(df: float, confidence: float = CONFIDENCE) -> float:
    """Student's t two-sided quantile for `confidence` at `df` degrees of freedom (Cornish-Fisher to the 1/df² term:
    within 0.3% of the exact value from 3 degrees of freedom up); the normal quantile for infinite df."""
    q = z(confidence)
    if not math.isfinite(df):
        return q
    return q + (q ** 3 + q) / (4 * df) + (5 * q ** 5 + 16 * q ** 3 + 3 * q) / (96 * df ** 2)


def run_to_run_noise(name: str, confidence: float = CONFIDENCE) -> float:
    """The half-width (a share of the median) of one window's median around the long-run median: what a record too
    short for an interval of its own carries, and what `recommend` adds when it mixes runs."""
    policy = device(name)
    return math.expm1(z(confidence) * math.hypot(policy.window_noise, policy.run_noise))


def percent(value: float) -> str:
    """0.1 → '10%', 0.015 → '1.5%'."""
    return f"{value * 100:.3g}%"


def precision_words() -> str:
    """'±10% on a CPU, ±1% on a GPU': the default precision of every device, for texts."""
    names = {"cpu": "a CPU", "cuda": "a GPU"}
    return ", ".join(f"±{percent(p.precision)} on {names.get(d, d)}" for d, p in DEVICES.items())


def timing_words() -> str:
    """How a record's time, interval and noise flag are made, and how compare judges them: the report's legend."""
    return (f"Times are the median of the raw samples, in milliseconds per call, taken in windows (rounds) spread "
            f"over the run: a window's sampling stops once its samples' {percent(CONFIDENCE)} interval is within the "
            f"precision the suite asks (timing.precision; by default {precision_words()}), or its budget runs out "
            "(the record's stop field says which). The interval is the run's, at "
            f"{percent(CONFIDENCE)}: the spread of the windows' medians pooled with the device's window noise, plus the "
            "device's run-to-run noise that no window of one run sees (docs/verdicts.md); it is the shaded band in the "
            "latency chart and the interval column in the table. A noisy measurement — the windows' part of its "
            "interval wider than the precision asked, or, for a record written before intervals, an IQR (75th − 25th "
            f"percentile) over {percent(NOISE_THRESHOLD)} of its median — is drawn with a hollow marker and its median "
            "has a ~ in front. compare calls a change a regression when it exceeds the threshold "
            f"({percent(CHANGE_THRESHOLD)} by default) and the run-to-run noise and the two intervals do not overlap; "
            "a slowdown of the kernels' pace beyond what identical runs differ by (over the machine's own pace, where "
            "a CPU run timed it) fails it too, and names the backends that moved with it.")


def noisy_words() -> str:
    """What the ~ of a table cell says, for the Markdown summary."""
    return (f"~ marks a noisy one: the windows' part of its interval wider than the precision asked, or, written "
            f"before intervals, its IQR over {percent(NOISE_THRESHOLD)} of the median")


def policy_table() -> str:
    """The device table as Markdown, for the docs and `attnbench policy`."""
    lines = ["| device | precision | rounds | refine | window noise | run noise | pace noise | probe noise | ratio noise "
             "| backend noise | measured on |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, p in DEVICES.items():
        probe = percent(p.probe_noise) if p.probe_noise is not None else "no probe"
        lines.append(f"| {name} | ±{percent(p.precision)} | {p.rounds} | {p.refine:g} | {percent(p.window_noise)} "
                     f"| {percent(p.run_noise)} | {percent(p.pace_noise)} | {probe} | {percent(p.ratio_noise)} "
                     f"| {percent(p.backend_noise)} | {p.evidence} |")
    lines += ["", f"Intervals are stated at {percent(CONFIDENCE)}; compare judges changes of at least "
                  f"{percent(CHANGE_THRESHOLD)} (unless asked otherwise) with a {percent(FAMILY_ALPHA)} chance per rule "
                  f"that two identical runs raise one; a backend's across-the-board shift needs {MIN_BACKEND_CASES} "
                  f"matched cases; priors weigh {PRIOR_WINDOWS} windows and {PRIOR_RATIOS} ratios."]
    return "\n".join(lines)
