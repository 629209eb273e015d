"""The default signal: recent demand, plus the headroom its own past forecast errors call for.

Per resource r with a ``{r}_allocated`` series, demand d is ``{r}_allocated`` + ``{r}_pending``
(pending 0 where it has no point). With H the horizon (``horizon_minutes``: a node's join delay
plus one run, the time a request takes to become capacity):

  base(t)    = d(t) + max(season(t), ramp(t))
  held(t)    = max of base over the last ``hold_minutes``        (up at once, down only after a hold),
               or over the last ``release_minutes`` when that is more than ``release_headrooms`` lower
               (a fall far beyond the noise, such as a batch wave's end, is let go early); with
               ``follow_falls`` (off by default), after a steady fall the window's bases moved down
               the fall to now (``steady_fall``)
  request    = max(d(now), held(now) + max(headroom, min_spare × held(now))) + stuck_factor × stuck

  stuck      = pending work while the demand is no more than was asked for a horizon or more ago
               (capacity had time to join): it did not fit, a packing problem (free room split
               over many nodes, none big enough) that utilisation cannot see; the largest such
               amount of the last ``stuck_minutes`` is asked for ``stuck_factor`` times over,
               which gets and keeps a node with room for it
               (remembered by the signal's process; a restart forgets it)

  season(t)  = the largest rise seen k periods P earlier, k = 1 .. as far as the history goes (up to
               ``MAX_PERIODS``), max(d over (t-kP, t-kP+H+L]) - max(d over [t-kP-J, t-kP]):
               the next rise is asked for at the earliest start seen so far less H + L; with fewer
               than ``PERIODS_SEEN`` periods seen, L = ``LEAD`` = 6 points (a period's waves come a
               few minutes early or late: ±4 against the one before), from then on ``SHORT_LEAD`` = 2
               (the earliest of three or more starts is a better guess of the next one),
               less what has risen here already: over the last J points, or over the last H + L + J
               less the noise floor (a wave that comes here earlier than it came in an old period is
               that wave, not another to ask for on top), when above the noise,
               when the history has a period (autocorrelation of the first differences of 5-minute
               means, strongest lag, its first harmonic that is nearly as strong); J = 4 minutes of
               slack for a period that is not exact
  ramp(t)    = the median step × H, only for a sustained rise: the last ``ramp_points`` steps all
               rose, together by more than ``spread_k`` times the noise of one step, the smallest
               by at least a quarter of the largest (a jump is in d(t) already, not a trend)
  headroom   = median + spread_k × MAD of the past errors of exactly this rule at the horizon:
               e(t) = max(d over (t, t+H]) - held(t), over the whole window

The period and the headroom are worked out again every ``refresh_minutes`` from the window the
signal is given; in between a run costs a few dozen steps, however long the window. With the
period the headroom is measured both with and without the seasonal term, and the term is used only
when it scores better by ``PERIOD_GAIN``: the average request plus ``SHORTFALL_WEIGHT`` times the
demand it would have left unmet. With less history than ``min_history_minutes`` the headroom is
``warmup_headroom`` × the level, under the same hold and release. A resource with no
``{r}_allocated`` data gets no opinion.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import overload

from clusterman_signals.base_signal import BaseSignal
from clusterman_signals.base_signal import MetricsValuesDict
from clusterman_signals.base_signal import SignalResources

RESOURCES = ("cpus", "mem", "disk", "gpus")
DEFAULTS: dict[str, float] = {
    "horizon_minutes": 4.0,
    "hold_minutes": 20.0,
    "spread_k": 3.0,
    "ramp_points": 5.0,
    "release_minutes": 5.0,
    "release_headrooms": 3.0,
    "refresh_minutes": 120.0,
    "stuck_factor": 2.0,
    "stuck_minutes": 60.0,
    "min_history_minutes": 120.0,
    "warmup_headroom": 0.1,
    "min_period_minutes": 30.0,
    "min_correlation": 0.3,
    "seasonal": 1.0,
    "min_spare": 0.0,
    "follow_falls": 0.0,
    "fall_evenness": 0.15,
    "shortfall_price": 0.0,
}
BUCKET = 5  # points per bucket when looking for a period
SLACK = 4  # points of slack around the period
LEAD = 6  # points looked ahead past the horizon, one period ago: waves ±2 minutes apart (4 missed some)
SHORT_LEAD = 2  # ... or 2 points, once PERIODS_SEEN periods are: the earliest of them, less 2 minutes
PERIODS_SEEN = 3  # (2 were too few: batch's third wave, with 2 to go by, was 4 minutes short)
MAX_PERIODS = 4  # periods looked back at most (a day of 6-hour waves has 3)
EARLY_CORRELATION = 0.9  # a period longer than half the history: correlation needed
EARLY_OVERLAP = 10  # ... over at least this many buckets
SHORTFALL_WEIGHT = 20.0  # a CPU short costs this many CPUs idle, when choosing whether to use a period
PERIOD_GAIN = 0.98  # ... and a period is used only when it lowers that score by 2% (a near tie is chance)
NARROW = 10  # sliding_max picks from a window of up to this many points directly (faster than blocks)


@dataclass(frozen=True)
class Model:
    """What the last refresh found for one resource; all counts in points of the series."""

    at: float  # when it was worked out (the run's timestamp)
    period: int  # 0: no period used
    headroom: float  # in the resource's units
    step_noise: float  # MAD of one step's change


class Demand:
    """allocated + pending as a sequence, without building it: pending aligned by index when its
    timestamps are the last ones of allocated's (the collector writes them together; a shorter
    window of pending is their tail), else by timestamp."""

    def __init__(self, allocated: Sequence[Sequence[float]], pending: Sequence[Sequence[float]]) -> None:
        self.allocated = allocated
        self.n = len(allocated)
        # allocated[j] pairs with pending[j - skip]; the first ``skip`` points have no pending point
        self._skip = self.n - len(pending)
        self._pending = pending
        self._aligned = (
            bool(pending)
            and self._skip >= 0
            and pending[0][0] == allocated[self._skip][0]
            and pending[-1][0] == allocated[-1][0]
        )
        self._by_time: dict[float, float] | None = None
        if pending and not self._aligned:
            self._by_time = {float(t): float(v) for t, v in pending}

    @overload
    def __getitem__(self, j: int) -> float: ...
    @overload
    def __getitem__(self, j: slice) -> list[float]: ...
    def __getitem__(self, j: int | slice) -> float | list[float]:
        if isinstance(j, slice):
            start, stop, stride = j.indices(self.n)
            skip = self._skip
            if self._aligned and stride == 1 and start >= skip:  # a run's every minute: no call per point
                pairs = zip(self.allocated[start:stop], self._pending[start - skip : stop - skip], strict=True)
                return [float(a[1]) + max(float(p[1]), 0.0) for a, p in pairs]
            return [self.at(k) for k in range(start, stop, stride)]
        return self.at(j)

    def at(self, j: int) -> float:
        a = float(self.allocated[j][1])
        if self._aligned:
            j %= self.n  # a negative index counts from the end, as a list's does
            return a + (max(float(self._pending[j - self._skip][1]), 0.0) if j >= self._skip else 0.0)
        if self._by_time is not None:
            return a + max(self._by_time.get(float(self.allocated[j][0]), 0.0), 0.0)
        return a

    def pending_now(self) -> float:
        p = self._pending
        return max(float(p[-1][1]), 0.0) if p and p[-1][0] == self.allocated[-1][0] else 0.0

    def time(self, j: int) -> float:
        return float(self.allocated[j][0])

    def values(self) -> list[float]:
        return self[0 : self.n]


class ForecastHeadroom(BaseSignal):
    """See the module docstring; parameters as in ``DEFAULTS`` (minutes, or a multiplier)."""

    def __init__(self, cluster: str, pool: str, parameters: dict[str, Any] | None = None) -> None:
        super().__init__(cluster, pool, parameters)
        self._models: dict[str, Model] = {}
        self._bases: dict[str, dict[float, float]] = {}
        self._stuck: dict[
            str, tuple[float, float]
        ] = {}  # resource -> (when, pending that did not fit)  # base(t) by timestamp, for the current model

    def p(self, name: str) -> float:
        return float(self.parameters.get(name, DEFAULTS[name]))

    def value(self, metrics: MetricsValuesDict, timestamp: float) -> SignalResources:
        request: dict[str, float | None] = {}
        for r in RESOURCES:
            allocated = metrics.get(f"{r}_allocated") or []
            if not allocated:
                request[r] = None
                continue
            demand = Demand(allocated, metrics.get(f"{r}_pending") or [])
            request[r] = self.request(r, demand, float(timestamp) if timestamp else demand.time(-1))
        return SignalResources(**request)

    def request(self, resource: str, d: Demand, now: float) -> float:
        step = _step_seconds(d)
        level = d[d.n - 1]
        if (d.n - 1) * step < self.p("min_history_minutes") * 60:
            return self.warm_up(d, step)
        model = self._models.get(resource)
        if model is None or now < model.at or now - model.at >= self.p("refresh_minutes") * 60:
            model = self._models[resource] = self.refresh(d.values(), step, now)
            self._bases[resource] = {}
        rule = Rule(self, step, model.period, model.step_noise)
        i = d.n - 1
        known, recent = self._bases[resource], {}
        for j in range(max(0, i - rule.hold + 1), i + 1):
            t = d.time(j)
            base = known.get(t)
            recent[t] = rule.base(d, j) if base is None or j == i else base  # the newest point may change
        self._bases[resource] = recent
        bases = list(recent.values())
        first = max(0, i - rule.hold + 1)
        window = d[first : i + 1]
        fell = max(window) - max(window[max(0, i - rule.release + 1 - first) :])
        held = release(max(bases), max(bases[-rule.release :]), fell, rule.release_by * max(model.headroom, 0.0))
        if self.p("follow_falls") > 0:
            followed = steady_fall(window, bases, rule.floor, self.p("fall_evenness"))
            if followed is not None:
                held = min(held, max(followed, level))
        stuck = self.stuck(resource, d, bases[: -rule.horizon], model, now)
        spare = max(model.headroom, held * self.p("min_spare"))
        return max(level, held + spare) + self.p("stuck_factor") * stuck

    def warm_up(self, d: Demand, step: float) -> float:
        """Before there are errors to measure: held and let go as later, ``warmup_headroom`` of the
        level standing for the headroom."""
        rule = Rule(self, step, 0, 0.0)
        window = d[max(0, d.n - rule.hold) : d.n]
        recent = max(window[-rule.release :])
        held = release(max(window), recent, max(window) - recent, rule.release_by * self.p("warmup_headroom") * recent)
        return held * (1 + self.p("warmup_headroom"))

    @property
    def newsvendor(self) -> bool:
        """The spare is a quantile of the errors (``shortfall_price`` set), not median + k × MAD under a hold."""
        return self.p("shortfall_price") > 0

    def quantile(self) -> float:
        """The newsvendor's critical ratio: a CPU-minute short costs ``shortfall_price`` idle ones, so
        the spare covers the errors up to price / (price + 1) of the time."""
        price = self.p("shortfall_price")
        return price / (price + 1)

    def stuck(self, resource: str, d: Demand, earlier: list[float], model: Model, now: float) -> float:
        """Pending work while the demand is no more than was asked for a horizon or more ago (time
        enough for capacity to join) did not fit: the largest such amount of the last
        ``stuck_minutes`` (remembered by this process)."""
        since, amount = self._stuck.get(resource, (-math.inf, 0.0))
        if now - since > self.p("stuck_minutes") * 60 or now < since:
            amount = 0.0
        pending = d.pending_now()
        if pending > 0 and earlier and d[d.n - 1] <= max(earlier) + model.headroom:
            amount = max(amount, pending)
            self._stuck[resource] = (now, amount)
        return amount

    def refresh(self, values: list[float], step: float, now: float) -> Model:
        """The period and the headroom, from the whole window (once every ``refresh_minutes``)."""
        diffs = sorted(map(abs, map(operator.sub, values[1:], values[:-1])))  # |b - a|, in C
        noise = diffs[len(diffs) // 2] if diffs else 0.0
        rule = Rule(self, step, 0, noise)
        if len(values) <= rule.horizon:  # no error can be measured yet
            return Model(now, 0, 0.0, noise)
        seen = Hindsight.of(values, rule)
        headroom, score = self._headroom(values, rule, seen)
        best = Model(now, 0, headroom, noise)
        if self.p("seasonal") > 0:
            period = find_period(values, int(self.p("min_period_minutes") * 60 / step), self.p("min_correlation"))
            if period:
                seasonal = self._headroom(values, Rule(self, step, period, noise), seen)
                if seasonal[1] < PERIOD_GAIN * score:
                    best = Model(now, period, seasonal[0], noise)
        return best

    def _headroom(self, values: list[float], rule: Rule, seen: Hindsight) -> tuple[float, float]:
        """(the spare this rule's errors at the horizon call for, its score): the score is
        the mean request plus ``SHORTFALL_WEIGHT`` (or ``shortfall_price``) times the mean demand it
        would have left unmet. The early release depends on the headroom: it is measured first
        without it, then again with it. The spare is median + k × MAD, or with ``shortfall_price``
        the newsvendor's quantile of the errors."""
        n, h = len(values), rule.horizon
        base = rule.bases(values)
        long, short = sliding_max(base, rule.hold, ahead=False), sliding_max(base, rule.release, ahead=False)
        future = seen.future
        first = self._spread([future[j] - long[j] for j in range(n - h)])
        threshold = rule.release_by * max(first, 0.0)
        held = [release(a, b, f, threshold) for a, b, f in zip(long, short, seen.fell, strict=True)]
        errors = [future[j] - held[j] for j in range(n - h)]
        headroom = self._spread(errors)
        short_sum = math.fsum(e - headroom for e in errors if e > headroom) / len(errors)
        weight = self.p("shortfall_price") if self.newsvendor else SHORTFALL_WEIGHT
        return headroom, math.fsum(held) / n + headroom + weight * short_sum

    def _spread(self, errors: list[float]) -> float:
        """median + spread_k × MAD; with ``shortfall_price``, the errors' newsvendor quantile."""
        ordered = sorted(errors)
        if self.newsvendor:
            return ordered[min(len(ordered) - 1, math.ceil(self.quantile() * len(ordered)) - 1)]
        median = ordered[len(ordered) // 2]
        mad = sorted(abs(e - median) for e in ordered)[len(ordered) // 2]
        return median + self.p("spread_k") * mad


@dataclass(frozen=True)
class Hindsight:
    """What a refresh measures every rule against (the same with and without the period): per point,
    the demand's top over the horizon after it, and how far it fell (its top over the hold less its
    top over the last ``release_minutes``)."""

    future: list[float]
    fell: list[float]

    @staticmethod
    def of(values: list[float], rule: Rule) -> Hindsight:
        behind = (sliding_max(values, w, ahead=False) for w in (rule.hold, rule.release))
        return Hindsight(future_max(values, rule.horizon), [a - b for a, b in zip(*behind, strict=True)])


class Rule:
    """base(t) of the module docstring, for one step size, period and noise."""

    def __init__(self, signal: ForecastHeadroom, step: float, period: int, noise: float) -> None:
        self.horizon = max(1, round(signal.p("horizon_minutes") * 60 / step))
        self.hold = max(1, round(signal.p("hold_minutes") * 60 / step))
        self.release = max(1, min(self.hold, round(signal.p("release_minutes") * 60 / step)))
        self.release_by = signal.p("release_headrooms")
        self.ramp_points = max(0, int(signal.p("ramp_points")))
        self.ramp_floor = signal.p("spread_k") * noise * math.sqrt(self.ramp_points)
        self.floor = signal.p("spread_k") * noise * 2
        self.period = period

    def base(self, d: Demand | list[float], j: int) -> float:
        now = d[j]
        extra = 0.0
        p = self.period
        if p and j - p - SLACK >= 0:
            # the largest rise k periods ago (k = 1 .., as far as the history goes), from the
            # highest point of the slack before (t - kP) to the highest of the horizon and the lead
            # after it, less what has risen here already: the earliest past start, less H + lead
            backs = range(p, j - SLACK + 1, p)[:MAX_PERIODS]
            lead = LEAD if len(backs) < PERIODS_SEEN else SHORT_LEAD
            seen = max(
                now - min(d[j - SLACK : j + 1]),
                now - min(d[max(0, j - SLACK - self.horizon - lead) : j + 1]) - self.floor,
            )
            top_rise = 0.0
            for back in backs:
                then = max(d[j - back - SLACK : j - back + 1])
                top = max(d[j - back + 1 : min(j - back + self.horizon + lead, j) + 1])
                top_rise = max(top_rise, top - then)
            rise = top_rise - max(seen, 0.0)
            if rise > self.floor:  # a rise above the noise
                extra = rise
        return self._ramped(d, j, now, extra)

    def bases(self, values: list[float]) -> list[float]:
        """``[base(values, j) for every j]``, each window's max or min read from a sliding one (a
        refresh asks for every point: windows per point cost more than the rest of it). The same
        values in the same operations as ``base``: the same floats."""
        n, p, h = len(values), self.period, self.horizon
        if not p or n - p - SLACK <= 0:  # no point has a period behind it: each base is its ramp alone
            return [self._ramped(values, j, values[j], 0.0) for j in range(n)]
        leads = (LEAD, SHORT_LEAD)
        recent_low = sliding_max(values, SLACK + 1, ahead=False, pick=min)  # min(d[j - SLACK .. j])
        lows = {lead: sliding_max(values, SLACK + h + lead + 1, ahead=False, pick=min) for lead in leads}
        then_at = sliding_max(values, SLACK + 1, ahead=False)  # max(d[i - SLACK .. i])
        tops = {lead: sliding_max(values, h + lead, ahead=True) for lead in leads}  # max(d[i .. i + h + lead - 1])
        floor = self.floor
        out = [self._ramped(values, j, values[j], 0.0) for j in range(min(n, p + SLACK))]
        for j in range(p + SLACK, n):
            now = values[j]
            backs = range(p, j - SLACK + 1, p)[:MAX_PERIODS]
            lead = LEAD if len(backs) < PERIODS_SEEN else SHORT_LEAD
            seen = max(now - recent_low[j], now - lows[lead][j] - floor)
            top_rise = 0.0
            top_from = tops[lead]
            for back in backs:
                i = j - back
                top = top_from[i + 1] if i + h + lead <= j else max(values[i + 1 : j + 1])
                top_rise = max(top_rise, top - then_at[i])
            rise = top_rise - max(seen, 0.0)
            out.append(self._ramped(values, j, now, rise if rise > floor else 0.0))
        return out

    def _ramped(self, d: Demand | list[float], j: int, now: float, extra: float) -> float:
        """``base``'s last step: a sustained ramp over the last ``ramp_points`` adds its trend."""
        r = self.ramp_points
        if r and j >= r and now - d[j - r] > self.ramp_floor:
            last = d[j - r : j + 1]
            steps = sorted(b - a for a, b in itertools.pairwise(last))
            # sustained: every step rose, by similar amounts (a jump over a step or two is in d(t)
            # already, not a trend to extrapolate)
            if steps[0] > 0 and steps[0] >= 0.25 * steps[-1]:
                extra = max(extra, steps[len(steps) // 2] * self.horizon)
        return now + extra


def release(held: float, recent: float, fell: float, threshold: float) -> float:
    """The hold, let go early after a fall far beyond the noise: when the last ``release_minutes``
    stayed more than ``threshold`` (``release_headrooms`` headrooms) below it and the demand itself
    fell as far (``fell``: its top over the hold less its top over the last ``release_minutes``: a
    batch wave over, a crowd gone). A wave asked for ahead of time that comes late is kept for the
    whole hold: demand that has not come has not fallen."""
    return recent if held - recent > threshold and fell > threshold else held


def steady_fall(values: list[float], bases: list[float], floor: float, evenness: float) -> float | None:
    """The hold that follows a steady fall: each base of the window moved down the fall to now, the
    largest of them; None when the window did not fall steadily. Steady: the means of the window's
    four quarters fall from one to the next, each step at least ``evenness`` of the whole fall,
    and the whole fall is more than ``floor`` (the noise): a wave fading or an evening's decline,
    not a step down after a burst (one quarter takes the whole fall)."""
    n = len(values)
    if n < 8 or len(bases) != n:
        return None
    cuts = [round(k * n / 4) for k in range(5)]
    means = [math.fsum(values[a:b]) / (b - a) for a, b in itertools.pairwise(cuts)]
    fall = means[0] - means[-1]
    if fall <= floor or min(a - b for a, b in itertools.pairwise(means)) < evenness * fall:
        return None
    per_point = fall / (n * 3 / 4)  # the quarters' centres are three quarters of the window apart
    return max(base - per_point * (n - 1 - x) for x, base in enumerate(bases))


def future_max(values: list[float], h: int) -> list[float]:
    """out[j] = max(values[j+1 .. j+h]) (the last value repeated past the end)."""
    return sliding_max([*values[1:], values[-1]], h, ahead=True)


def _step_seconds(d: Demand) -> float:
    """The typical spacing of the series: the mean of its last (up to) nine gaps; 60 s when unknown."""
    n = d.n
    if n < 2:
        return 60.0
    first = max(0, n - 10)
    gap = (d.time(n - 1) - d.time(first)) / (n - 1 - first)
    return gap if gap > 0 else 60.0


def sliding_max(
    values: Sequence[float], width: int, *, ahead: bool, pick: Callable[[float, float], float] = max
) -> list[float]:
    """out[j] = max(values[j-width+1 .. j]) (behind) or max(values[j .. j+width-1]) (ahead), the
    window cut at the ends (``pick=min``: the least). A narrow window (up to ``NARROW`` points) is
    picked from directly: ``pick`` over ``width`` shifted slices, in C. A wide one in blocks of
    ``width``: a window is the tail of one block and the head of the next, so out[j] is the larger
    of a running max from the right and one from the left, both run in C (``accumulate``): a few
    operations a point whatever the width. Both give the window's largest value."""
    n = len(values)
    if width <= 1 or n == 0:
        return list(values)
    if ahead:
        return sliding_max(values[::-1], width, ahead=False, pick=pick)[::-1]
    if width <= NARROW:
        cut = list(itertools.accumulate(values[: width - 1], pick))  # the windows the start cuts short
        if n < width:
            return cut
        return cut + list(map(pick, *(values[k : n - width + 1 + k] for k in range(width))))
    head: list[float] = []  # max from the start of j's block to j
    tail: list[float] = []  # max from j to the end of j's block
    for k in range(0, n, width):
        block = values[k : k + width]
        head += itertools.accumulate(block, pick)
        tail += reversed(list(itertools.accumulate(reversed(block), pick)))
    return head[:width] + list(map(pick, tail[1 : n - width + 1], head[width:]))


def find_period(values: Sequence[float], min_lag: int, min_correlation: float) -> int:
    """The period in points, or 0: the lag where the first differences of bucket means correlate
    best (at least ``min_correlation``), taking the shortest lag nearly as good (a harmonic).

    Lags up to half the series come first. When none qualifies, a longer lag is accepted if its
    correlation reaches ``EARLY_CORRELATION`` over at least ``EARLY_OVERLAP`` buckets: a step that
    repeats exactly is found after its second occurrence, not only after two whole periods (batch
    waves every 6 hours: from the third wave on instead of the fourth)."""
    means = [math.fsum(values[k : k + BUCKET]) / BUCKET for k in range(0, len(values) - BUCKET + 1, BUCKET)]
    x = [b - a for a, b in itertools.pairwise(means)]
    n = len(x)
    first = max(2, math.ceil(min_lag / BUCKET))
    squares = [0.0]
    for v in x:
        squares.append(squares[-1] + v * v)

    def correlations(lags: range) -> list[tuple[int, float]]:
        out = []
        for lag in lags:
            head, tail = squares[n - lag], squares[n] - squares[lag]
            if head > 0 and tail > 0:
                out.append((lag, sum(map(operator.mul, x[: n - lag], x[lag:])) / math.sqrt(head * tail)))
        return out

    for lags, least in (
        (range(first, n // 2 + 1), min_correlation),
        (range(max(first, n // 2 + 1), n - EARLY_OVERLAP + 1), max(min_correlation, EARLY_CORRELATION)),
    ):
        scores = correlations(lags)
        top = max((score for _, score in scores), default=0.0)
        if scores and top >= least:
            lag = next(lag for lag, score in scores if score >= 0.85 * top and _local_peak(scores, lag))
            return lag * BUCKET
    return 0


def _local_peak(scores: list[tuple[int, float]], lag: int) -> bool:
    k = bisect.bisect_left(scores, lag, key=operator.itemgetter(0))
    here = scores[k][1]
    return all(scores[m][1] <= here for m in (k - 1, k + 1) if 0 <= m < len(scores))
