"""Choose a detector's sensitivity for a false-alarm budget, on the stream's own history.

``shiftwatch calibrate SOURCE --operator NAME --budget 1/10000`` answers "which ``delta`` /
``threshold`` / ``alpha`` gives me at most one false alarm in 10,000 records (or one a day) on
*my* stream?". The method:

1. **Quiet history.** Records are grouped by ``key``; labelled change points (positions in
   each key's own stream, as ``shiftwatch replay --labels`` reads them: one list for every
   key or a list per key, :mod:`shiftwatch.sinks.labels`) are cut out with ``margin``
   records on each side. What is left is a list of quiet segments, each taken as one
   stationary regime.
2. **Resampling that keeps dependence.** Replicates are drawn by the stationary bootstrap
   (Politis & Romano 1994) inside one segment at a time (never across a labelled change,
   which would inject the very jumps the detector looks for): blocks start at uniform
   positions (circularly) and have geometric lengths of mean ``b``. ``b`` is chosen from the
   data's autocorrelation by the rule of Politis & White (2004, with Patton, Politis & White
   2009's correction): the flat-top lag window ``M = 2 m`` where ``m`` is the first lag after
   which 5 autocorrelations are insignificant, and ``b = (2 G^2 / D)^(1/3) n^(1/3)``. For an
   AR(1) with ``phi = 0.9`` this gives blocks of a few dozen records; for i.i.d. data, 1-3.
   Vector values use the largest ``b`` over coordinates.
3. **Search.** The operator's declared sensitivity parameter
   (:func:`shiftwatch.operators.sensitivity.sensitivity_of`) is scanned on a grid from the
   least to the most sensitive end, then bisected between the last value that fits and the
   first that does not. Every candidate runs (fresh operator, ``process_batch``) over the
   *same* replicates (common random numbers keep the alarm counts monotone), with a total
   length of ``exposure / budget`` records, so that about ``exposure`` false alarms would be
   seen at the budget.
4. **Estimate and choose.** False alarms per budget unit (records, or hours/days of ``ts``) get
   a Garwood (exact Poisson) 90% interval; the chosen value is the most sensitive one whose
   upper bound (a one-sided 95% bound) fits the budget. Where a detector promises a bound of
   its own (``cs``: average run length >= 1/alpha) the table shows it beside the estimate.
5. **Detection delay.** For each grid value, shifts of 0.5, 1 and 2 robust scale units
   (1.4826 x MAD of the quiet values) are injected into bootstrap replicates after ``pre``
   records; the table gives the median delay (records) and the share detected within
   ``post`` records.

Poisson intervals ignore that alarms can cluster (a detector that fires twice in a row), so
the interval is a little narrow for such detectors; the fresh-stream checks in
``benchmarks/results/calibrate.md`` measure how the choice holds up.

References
----------
D. N. Politis and J. P. Romano. The stationary bootstrap. JASA 89 (1994).
D. N. Politis and H. White. Automatic block-length selection for the dependent bootstrap.
Econometric Reviews 23 (2004); A. Patton, D. N. Politis and H. White, correction, 28 (2009).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shiftwatch.sinks.key_names import key_label

__all__ = ["Calibration", "calibrate", "block_length", "stationary_bootstrap",
           "parse_budget", "garwood_interval", "UNITS"]

#: Budget units: seconds per unit (None: records).
UNITS: dict[str, float | None] = {"record": None, "hour": 3600.0, "day": 86400.0,
                                  "week": 604800.0}


# --------------------------------------------------------------------------------------
# Small pieces
# --------------------------------------------------------------------------------------


def parse_budget(spec: Any) -> float:
    """A budget ``"1/10000"``, ``"0.5"`` or a number as false alarms per unit (> 0).

    >>> parse_budget("1/10000"), parse_budget("2/7"), parse_budget(0.01)
    (0.0001, 0.2857142857142857, 0.01)
    """
    try:
        if isinstance(spec, str) and "/" in spec:
            num, den = spec.split("/", 1)
            value = float(num) / float(den)
        else:
            value = float(spec)
    except (ValueError, ZeroDivisionError, TypeError):
        raise ValueError(f"budget must be a number or a fraction such as 1/10000, got "
                         f"{spec!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"budget must be > 0 false alarms per unit, got {spec!r}")
    return value


def garwood_interval(count: int, exposure: float, level: float = 0.90) -> tuple[float, float]:
    """Exact (Garwood) two-sided Poisson interval for a rate ``count / exposure``.

    >>> [round(v, 3) for v in garwood_interval(0, 1000.0)]
    [0.0, 0.003]
    >>> [round(v, 2) for v in garwood_interval(10, 1.0)]
    [5.43, 16.96]
    """
    from scipy.stats import chi2

    a = 1.0 - level
    lo = 0.0 if count == 0 else float(chi2.ppf(a / 2, 2 * count)) / 2.0
    hi = float(chi2.ppf(1 - a / 2, 2 * count + 2)) / 2.0
    return lo / exposure, hi / exposure


def _acf(x: np.ndarray, max_lag: int) -> np.ndarray:
    x = x - x.mean()
    n = x.size
    f = np.fft.rfft(x, 2 * n)
    r = np.fft.irfft(f * np.conj(f))[: max_lag + 1] / n
    return r  # autocovariances R(0..max_lag)


def block_length(x: Any, max_block: int | None = None) -> int:
    """Mean block length for the stationary bootstrap of ``x`` (Politis & White 2004).

    ``x`` is a 1-D series or a 2-D array (time x coordinates; the largest block over up to 8
    coordinates is returned). The result is in ``[1, max_block]`` (default ``n / 4``).

    >>> rng = np.random.default_rng(0)
    >>> e = rng.normal(size=4000)
    >>> ar = np.zeros(4000)
    >>> for t in range(1, 4000):
    ...     ar[t] = 0.9 * ar[t - 1] + e[t]
    >>> block_length(e), block_length(ar)
    (1, 84)
    """
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    arr = arr.reshape(arr.shape[0], -1)
    n = arr.shape[0]
    if n < 10:
        return 1
    cap = max(1, n // 4 if max_block is None else int(max_block))
    cols = np.linspace(0, arr.shape[1] - 1, min(arr.shape[1], 8)).astype(int)
    best = 1
    kn = 5  # consecutive insignificant autocorrelations that end the dependence
    c = 2.0 * math.sqrt(math.log10(n) / n)
    max_lag = min(n - 1, int(math.ceil(math.sqrt(n))) + kn, cap * 2 + kn)
    for j in np.unique(cols):
        r = _acf(arr[:, j], max_lag)
        if r[0] <= 0:
            continue
        rho = np.abs(r[1:] / r[0])
        m = max_lag - kn
        for k in range(max_lag - kn + 1):
            if np.all(rho[k:k + kn] < c):
                m = k
                break
        big_m = min(2 * max(m, 1), max_lag)
        lags = np.arange(-big_m, big_m + 1)
        u = np.abs(lags) / big_m
        lam = np.where(u <= 0.5, 1.0, np.where(u <= 1.0, 2.0 * (1.0 - u), 0.0))
        rk = r[np.abs(lags)]
        g = float(np.sum(lam * np.abs(lags) * rk))
        d = 2.0 * float(np.sum(lam * rk)) ** 2
        if d <= 0:
            continue
        b = (2.0 * g * g / d) ** (1.0 / 3.0) * n ** (1.0 / 3.0)
        best = max(best, int(math.ceil(b)))
    return int(min(best, cap))


def stationary_bootstrap(n: int, length: int, block: float,
                         rng: np.random.Generator) -> np.ndarray:
    """Indices into a series of length ``n``: a stationary-bootstrap replicate of ``length``.

    Blocks start uniformly (wrapping around the end) and have geometric lengths of mean
    ``block``.

    >>> stationary_bootstrap(10, 12, 3.0, np.random.default_rng(1)).tolist()
    [4, 5, 6, 7, 8, 9, 0, 1, 5, 8, 9, 0]
    """
    idx = np.empty(length, dtype=np.int64)
    pos = 0
    p = 1.0 / max(float(block), 1.0)
    while pos < length:
        start = int(rng.integers(n))
        k = min(int(rng.geometric(p)), length - pos)
        idx[pos:pos + k] = (start + np.arange(k)) % n
        pos += k
    return idx


# --------------------------------------------------------------------------------------
# History: per key, the quiet segments
# --------------------------------------------------------------------------------------


@dataclass
class _KeyHistory:
    key: Any
    segments: list[np.ndarray]          # values of each quiet segment (n_i, *shape)
    dt: float | None                    # mean seconds between records (None without ts)
    block: int = 1

    @property
    def n_quiet(self) -> int:
        return sum(len(s) for s in self.segments)


def _histories(records: Iterable[Any], labels: Sequence[int] | Mapping | None, margin: int,
               min_segment: int) -> tuple[list[_KeyHistory], dict]:
    """Each key's quiet segments: its records with the labelled changes cut out.

    A label is a position in the key's own stream (the ``n``-th record of that key, as
    ``shiftwatch replay --labels`` counts it: dead letters of the source take no position,
    records whose value the history cannot use do); ``labels`` is one list for every key or a
    mapping resolved by :func:`shiftwatch.sinks.labels.plan_labels` (raises
    :class:`~shiftwatch.sinks.labels.LabelsError` for a name that is not a key).
    """
    from collections import Counter

    from shiftwatch.codec import key_text
    from shiftwatch.operators import DeadLetter
    from shiftwatch.records import reason_kind
    from shiftwatch.sinks.labels import plan_labels, positions_of

    by_key: dict[Any, dict[str, list]] = {}
    seen: dict[Any, int] = {}  # records of each key so far: the next one's position
    n_records = 0
    unusable: Counter[str] = Counter()  # why records were skipped, by kind
    for rec in records:
        if isinstance(rec, DeadLetter):
            unusable[reason_kind(rec.reason)] += 1
            continue
        if not isinstance(rec, Mapping):
            unusable["record is not a mapping"] += 1
            continue
        key = rec.get("key")
        key = tuple(key) if isinstance(key, list) else key
        position = seen.get(key, 0)
        seen[key] = position + 1
        if "value" not in rec:
            unusable["record has no value"] += 1
            continue
        try:
            value = np.asarray(rec["value"], dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            unusable["value is not numeric"] += 1
            continue
        if not np.all(np.isfinite(value)):
            unusable["value is not finite"] += 1
            continue
        d = by_key.setdefault(key, {"pos": [], "val": [], "ts": []})
        d["pos"].append(position)
        d["val"].append(value)
        ts = rec.get("ts")
        d["ts"].append(float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool)
                       else math.nan)
        n_records += 1
    if isinstance(labels, Mapping):
        plan = plan_labels(labels, {key_text(k) for k in seen})
        key_labels = {k: positions_of(plan.for_key(key_text(k))) for k in by_key}
    else:
        shared = sorted({int(c) for c in labels or ()})
        key_labels = {k: shared for k in by_key}
    cut_total = 0
    out = []
    for key, d in by_key.items():
        shapes = {v.shape for v in d["val"]}
        if len(shapes) != 1:
            raise ValueError(f"key {key_label(key)}: values have several shapes "
                             f"{sorted(shapes)}")
        pos = np.asarray(d["pos"], dtype=np.int64)
        vals = np.stack(d["val"])
        ts = np.asarray(d["ts"])
        cps = np.asarray(key_labels[key], dtype=np.int64)
        keep = np.ones(len(pos), dtype=bool)
        for c in cps:
            keep &= ~((pos >= c - margin) & (pos < c + margin))
        cut_total += int((~keep).sum())
        # Quiet segments: maximal runs of kept records not separated by a label.
        bounds = np.searchsorted(cps, pos, side="right")
        segs, dts = [], []
        start = None
        for i in range(len(pos) + 1):
            same = (i < len(pos) and keep[i] and start is not None
                    and bounds[i] == bounds[start])
            if start is not None and not same:
                if i - start >= min_segment:
                    segs.append(vals[start:i])
                    dd = np.diff(ts[start:i])
                    dd = dd[np.isfinite(dd) & (dd > 0)]
                    if dd.size:
                        dts.append((float(dd.sum()), dd.size))
                start = None
            if i < len(pos) and keep[i] and start is None:
                start = i
        if not segs:
            continue
        dt = sum(s for s, _ in dts) / sum(k for _, k in dts) if dts else None
        out.append(_KeyHistory(key=key, segments=segs, dt=dt))
    info = {"records": n_records, "unusable": sum(unusable.values()),
            "unusable_reasons": dict(unusable.most_common()), "cut": cut_total,
            "keys": len(by_key)}
    if isinstance(labels, Mapping):
        info["labels_per_key"] = {key_text(k): v for k, v in key_labels.items() if v}
    return out, info


def _robust_scale(histories: list[_KeyHistory]) -> np.ndarray:
    # Per coordinate, 1.4826 x MAD around each segment's own median (regimes differ in level).
    devs = []
    for h in histories:
        for s in h.segments:
            devs.append(np.abs(s - np.median(s, axis=0)))
    dev = np.concatenate(devs)
    scale = 1.4826 * np.median(dev, axis=0)
    std = np.concatenate([s - s.mean(axis=0) for h in histories for s in h.segments]).std(axis=0)
    scale = np.where(scale > 0, scale, std)
    return np.where(scale > 0, scale, 1.0)


# --------------------------------------------------------------------------------------
# Running the operator
# --------------------------------------------------------------------------------------


def _as_python(v: np.ndarray) -> Any:
    return float(v) if v.ndim == 0 else v.tolist()


def _run(stages: list[tuple[str, dict]], key: Any, values: np.ndarray) -> np.ndarray:
    """Alarm indicator per input record of a fresh chain over ``values`` (-1: dead letter)."""
    from shiftwatch.operators import DeadLetter, create

    recs: list = [{"key": key, "offset": i, "value": _as_python(v)}
                  for i, v in enumerate(values)]
    for name, params in stages:
        op = create(name, **params)
        outs = op.process_batch(recs)
        recs = [o for o in outs if not isinstance(o, DeadLetter)]
    alarm = np.full(len(values), -1, dtype=np.int8)
    for o in recs:
        alarm[o["offset"]] = 1 if o.get("alarm") else 0
    return alarm


@dataclass
class _Replicate:
    history: _KeyHistory
    segment: int
    index: np.ndarray

    def values(self) -> np.ndarray:
        return self.history.segments[self.segment][self.index]


def _replicates(histories: list[_KeyHistory], total: int, length: int,
                rng: np.random.Generator) -> list[_Replicate]:
    weights = np.array([len(s) for h in histories for s in h.segments], dtype=float)
    pairs = [(h, i) for h in histories for i in range(len(h.segments))]
    reps = []
    made = 0
    while made < total:
        h, i = pairs[int(rng.choice(len(pairs), p=weights / weights.sum()))]
        k = min(length, total - made) if total - made >= length // 2 else length
        reps.append(_Replicate(h, i, stationary_bootstrap(len(h.segments[i]), k, h.block, rng)))
        made += k
    return reps


# --------------------------------------------------------------------------------------
# The result
# --------------------------------------------------------------------------------------


@dataclass
class Calibration:
    """What :func:`calibrate` found: the table of candidates and the chosen value.

    ``rows`` hold, per candidate value: ``value``, ``alarms``, ``exposure`` (budget units),
    ``rate`` and ``interval`` (false alarms per unit, Garwood 90%), ``fits`` (upper bound <=
    budget), ``guaranteed`` (the detector's own bound per unit, or None) and ``delays``
    (shift -> median delay in records and share detected; grid values only).
    """

    operator: str
    params: dict
    param: str
    budget: float
    unit: str
    chosen: float | None
    rows: list[dict]
    before: list[tuple[str, dict]] = field(default_factory=list)
    info: dict = field(default_factory=dict)

    @property
    def chosen_params(self) -> dict:
        return {**self.params, self.param: self.chosen}

    def pipeline_fragment(self) -> dict:
        """``{operator: NAME, params: {...}}`` (or ``{operators: [...]}`` for a chain)."""
        last = {"operator": self.operator, "params": _plain(self.chosen_params)}
        if not self.before:
            return last
        return {"operators": [{"operator": n, "params": _plain(p)} for n, p in self.before]
                + [last]}

    def to_dict(self) -> dict:
        return {"operator": self.operator, "params": _plain(self.params), "param": self.param,
                "budget": self.budget, "unit": self.unit, "chosen": self.chosen,
                "chosen_params": _plain(self.chosen_params) if self.chosen is not None
                else None, "before": [[n, _plain(p)] for n, p in self.before],
                "rows": _plain(self.rows), "info": _plain(self.info)}

    def table(self) -> str:
        """The candidates as a text table, least sensitive first."""
        unit = self.unit if self.unit != "record" else f"{_fmt(1 / self.budget)} records"
        per = f"per {unit}" if self.unit == "record" else f"per {self.unit}"
        shifts = sorted({s for r in self.rows for s in (r.get("delays") or {})}, key=float)
        head = f"{self.param:>12}  {'false alarms ' + per:>34}  {'guaranteed':>10}"
        head += "".join(f"  {'delay@' + str(s):>14}" for s in shifts)
        lines = [head]
        scale = 1.0 if self.unit != "record" else 1.0 / self.budget
        for r in self.rows:
            lo, hi = r["interval"]
            est = f"{r['rate'] * scale:.3g} [{lo * scale:.3g}, {hi * scale:.3g}]"
            mark = "  <- chosen" if r["value"] == self.chosen else ""
            g = "" if r["guaranteed"] is None else f"<= {r['guaranteed'] * scale:.3g}"
            line = f"{_fmt(r['value']):>12}  {est:>34}  {g:>10}"
            for s in shifts:
                d = (r.get("delays") or {}).get(s)
                cell = "" if d is None else (
                    f"{_fmt(d['median'])} ({d['detected']:.0%})" if d["median"] is not None
                    else f"- ({d['detected']:.0%})")
                line += f"  {cell:>14}"
            lines.append(line + mark)
        if shifts:
            lines.append("(delay@s: median records from a shift of s robust scale units to its "
                         "alarm, and the share of runs detected)")
        return "\n".join(lines)

    def summary(self) -> str:
        budget = (f"{_fmt(self.budget)} per record (1 per {_fmt(1 / self.budget)})"
                  if self.unit == "record" else f"{_fmt(self.budget)} per {self.unit}")
        i = self.info
        head = (f"{self.operator}: {self.param} for at most {budget}; quiet history "
                f"{i['quiet']} records in {i['segments']} segment(s), {i['keys']} key(s), "
                f"block length {i['block']}; {i['replicates']} replicates, "
                f"{i['exposure_records']} records per candidate")
        skipped = i.get("unusable_reasons") or {}
        if skipped:
            n = sum(skipped.values())
            head += (f"\nskipped {n} record{'' if n == 1 else 's'} the history cannot use: "
                     + ", ".join(f"{k} x {r}" for r, k in skipped.items()))
        if self.chosen is None:
            return head + "\nno value in the range fits the budget"
        return head

    def write(self, out_dir: str | Path) -> list[Path]:
        """Write ``calibration.json`` and ``calibrated.yaml`` into ``out_dir``, each whole or
        not at all; return their paths.

        Raises :class:`~shiftwatch.sinks.atomic_file.WriteFailed` (its ``failed`` names each
        file that could not be written, ``written`` the others) when one could not.
        """
        import yaml

        from shiftwatch.sinks.atomic_file import AtomicFile, WriteFailed

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        head = (f"# shiftwatch calibrate: {self.param} chosen for a budget of "
                f"{_fmt(self.budget)} false alarms per {self.unit}\n")
        files = {out / "calibration.json": json.dumps(self.to_dict(), indent=2) + "\n",
                 out / "calibrated.yaml": head + yaml.safe_dump(self.pipeline_fragment(),
                                                               sort_keys=False)}
        written: list[Path] = []
        failed: dict[str, str] = {}
        errno = None
        for path, text in files.items():
            try:
                with AtomicFile(path) as fh:
                    fh.write(text)
            except WriteFailed as exc:
                failed.update(exc.failed)
                errno = errno or exc.errno
            else:
                written.append(path)
        if failed:
            raise WriteFailed(failed, written, errno=errno)
        return written


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.3g}"


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


# --------------------------------------------------------------------------------------
# The method
# --------------------------------------------------------------------------------------


def calibrate(records: Iterable[Any], operator: str, params: Mapping | None = None, *,
              budget: float | str = "1/10000", per: str = "record",
              labels: Iterable[int] | Mapping = (), margin: int = 50,
              before: Sequence[tuple[str, Mapping]] = (), exposure: float = 20.0,
              length: int = 10_000, max_records: int = 2_000_000, grid: int = 9,
              refine: int = 12, tol: float = 0.02, shifts: Sequence[float] = (0.5, 1.0, 2.0),
              delay_runs: int = 10, pre: int = 500, post: int = 500,
              block: int | None = None, seed: int = 0) -> Calibration:
    """Choose ``operator``'s sensitivity parameter for a false-alarm ``budget`` on history.

    Parameters
    ----------
    records
        The history: records with ``value`` (and ``key``, ``ts``, ``offset``), e.g. a source;
        dead letters are skipped.
    operator, params
        The detector (a registered name that declares a sensitivity) and its fixed parameters.
    budget, per
        False alarms allowed per unit: ``"1/10000"`` with ``per="record"``, or per ``"hour"``,
        ``"day"``, ``"week"`` of event time (needs numeric ``ts``, seconds).
    labels, margin
        Known changes, as positions in each key's own stream (the ``n``-th record of the
        key): one list for every key, or a mapping per key (``{key: [positions]}``,
        ``{key: {annotator: [positions]}}``, ``"*"`` for every other key; the rule of
        :func:`shiftwatch.sinks.labels.plan_labels`, which rejects names that are not keys).
        ``margin`` records on each side of each are cut out.
    before
        Stages (name, params) run in front of the detector, unchanged (e.g. ``standardize``).
    exposure, length, max_records
        Replicates total ``exposure / budget`` records per candidate (at most ``max_records``),
        in replicates of ``length`` records (at least the quiet history of the key).
    grid, refine, tol
        Grid size over the declared range, then at most ``refine`` bisection steps, until
        the bracket is within ``tol`` (relative) of the chosen value.
    shifts, delay_runs, pre, post
        Injected mean shifts (robust scale units), runs per shift, records before the shift
        and records watched after it.
    block
        Mean bootstrap block length; None chooses it from the autocorrelation.
    seed
        Seed of every random draw.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> history = [{"value": float(v)} for v in rng.normal(size=3000)]
    >>> cal = calibrate(history, "river:PageHinkley", budget="1/1000", grid=5, refine=2,
    ...                 delay_runs=2, length=5000)
    >>> cal.param, round(cal.chosen, 2)
    ('threshold', 48.7)
    """
    from shiftwatch.operators.sensitivity import sensitivity_of

    params = dict(params or {})
    before = [(str(n), dict(p)) for n, p in before]
    sens = sensitivity_of(operator)
    if sens is None:
        raise ValueError(f"operator {operator!r} declares no sensitivity parameter; "
                         "calibrate works with detectors such as river:ADWIN, "
                         "river:PageHinkley, river:KSWIN, cs, karcher, shape, auto")
    if sens.param in params:
        raise ValueError(f"--param {sens.param} is what calibrate chooses for {operator}; "
                         "leave it out")
    if per not in UNITS:
        raise ValueError(f"per must be one of {', '.join(UNITS)}, got {per!r}")
    rate_budget = parse_budget(budget)
    for name, v in (("grid", grid), ("length", length), ("max_records", max_records)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 2:
            raise ValueError(f"{name} must be an integer >= 2, got {v!r}")
    if not (isinstance(exposure, (int, float)) and exposure > 0):
        raise ValueError(f"exposure must be > 0, got {exposure!r}")
    if isinstance(labels, Mapping) and set(labels) == {"*"} and not isinstance(
            labels["*"], Mapping):
        labels = labels["*"]  # one list for every key
    if not isinstance(labels, Mapping):
        labels = sorted(int(c) for c in labels)
    from shiftwatch.operators import create

    create(operator, **params, **{sens.param: sens.grid(2)[0]})  # bad params fail now
    for name, p in before:
        create(name, **p)

    rng = np.random.default_rng(seed)
    hists, info = _histories(records, labels, margin, min_segment=20)
    if not hists:
        raise ValueError("the history has no quiet stretch of 20 records or more "
                         f"({info['records']} usable records, {info['cut']} cut around labels)")
    for h in hists:
        h.block = int(block) if block is not None else block_length(
            np.concatenate([s - s.mean(axis=0) for s in h.segments]))
    unit_s = UNITS[per]
    if unit_s is not None:
        dts = [h.dt for h in hists]
        if any(d is None for d in dts):
            raise ValueError(f"--budget-per {per} needs numeric ts (seconds) in the records, "
                             "e.g. --source-opt ts=COLUMN")
    # Records per budget unit, over the keys' quiet history.
    quiet = sum(h.n_quiet for h in hists)
    rec_per_unit = 1.0 if unit_s is None else unit_s / (
        sum(h.dt * h.n_quiet for h in hists) / quiet)  # type: ignore[operator]
    per_record = rate_budget / rec_per_unit
    total = int(min(max_records, max(math.ceil(exposure / per_record), 2 * length)))
    rep_len = max(length, max(h.n_quiet for h in hists))
    reps = _replicates(hists, total, min(rep_len, total), rng)
    exposure_units = sum(len(r.index) for r in reps) / rec_per_unit
    scale = _robust_scale(hists)

    rows: dict[float, dict] = {}

    def evaluate(value: float, with_delays: bool) -> dict:
        if value in rows:
            return rows[value]
        p = {**params, sens.param: value}
        stages = [*before, (operator, p)]
        alarms = 0
        for r in reps:
            a = _run(stages, r.history.key, r.values())
            alarms += int((a == 1).sum())
        lo, hi = garwood_interval(alarms, exposure_units)
        g = sens.guaranteed_rate(value, p)
        row = {"value": value, "alarms": alarms, "exposure": exposure_units,
               "rate": alarms / exposure_units, "interval": [lo, hi],
               "fits": hi <= rate_budget,
               "guaranteed": None if g is None else g * rec_per_unit, "delays": None}
        if with_delays and delay_runs > 0 and shifts:
            row["delays"] = _delays(stages, hists, scale, shifts, delay_runs, pre, post,
                                    np.random.default_rng(seed + 1))
        rows[value] = row
        return row

    t0 = time.perf_counter()
    best: float | None = None
    nxt: float | None = None
    for v in sens.grid(grid):
        row = evaluate(v, with_delays=True)
        if row["fits"]:
            best = v
        else:
            nxt = v
            if row["interval"][0] > rate_budget:
                break  # clearly over: every more sensitive value is too
    if best is not None and nxt is not None:
        lo_v, hi_v = best, nxt
        for _ in range(refine):
            if abs(hi_v - lo_v) <= tol * abs(lo_v):
                break
            mid = sens.between(lo_v, hi_v)
            if mid in (lo_v, hi_v):
                break
            if evaluate(mid, with_delays=False)["fits"]:
                lo_v = mid
            else:
                hi_v = mid
        fitting = [v for v, r in rows.items() if r["fits"]]
        best = max(fitting, key=lambda v: sens._to_unit(v))
    if best is not None and rows[best]["delays"] is None and delay_runs > 0 and shifts:
        rows[best]["delays"] = _delays([*before, (operator, {**params, sens.param: best})],
                                       hists, scale, shifts, delay_runs, pre, post,
                                       np.random.default_rng(seed + 1))
    ordered = sorted(rows.values(), key=lambda r: sens._to_unit(r["value"]))
    info.update({"quiet": quiet, "segments": sum(len(h.segments) for h in hists),
                 "block": max(h.block for h in hists),
                 "blocks": {str(h.key): h.block for h in hists},
                 "replicates": len(reps), "exposure_records": sum(len(r.index) for r in reps),
                 "records_per_unit": rec_per_unit, "scale": scale.ravel().tolist(),
                 "labels": labels if not isinstance(labels, Mapping) else _plain(labels),
                 "margin": margin, "seed": seed,
                 "sensitivity": sens.to_dict(), "seconds": round(time.perf_counter() - t0, 2),
                 "interval": "Garwood 90%, choice on its upper end (one-sided 95%)"})
    return Calibration(operator=operator, params=params, param=sens.param,
                       budget=rate_budget, unit=per, chosen=best, rows=ordered,
                       before=before, info=info)


def _delays(stages: list[tuple[str, dict]], hists: list[_KeyHistory], scale: np.ndarray,
            shifts: Sequence[float], runs: int, pre: int, post: int,
            rng: np.random.Generator) -> dict:
    """Median delay (records) and share detected, per injected shift."""
    weights = np.array([h.n_quiet for h in hists], dtype=float)
    bases = []
    for _ in range(runs):
        h = hists[int(rng.choice(len(hists), p=weights / weights.sum()))]
        seg = int(rng.choice(len(h.segments), p=np.array([len(s) for s in h.segments])
                             / h.n_quiet))
        idx = stationary_bootstrap(len(h.segments[seg]), pre + post, h.block, rng)
        bases.append((h, h.segments[seg][idx]))
    out = {}
    for s in shifts:
        delays, hits = [], 0
        for h, base in bases:
            x = base.copy()
            if x.ndim == 3:  # matrices (SPD): add s x (scale of the diagonal) x identity
                x[pre:] += s * float(np.mean(np.diagonal(scale))) * np.eye(x.shape[1])
            else:  # scale has the value's shape (0-d for scalars)
                x[pre:] += s * scale
            a = _run(stages, h.key, x)
            after = np.flatnonzero(a[pre:] == 1)
            if after.size:
                hits += 1
                delays.append(int(after[0]))
        out[float(s)] = {"median": float(np.median(delays)) if delays else None,
                         "detected": hits / max(len(bases), 1)}
    return out
