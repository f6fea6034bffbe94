"""The null of ``shape``'s scan statistic: derives the threshold table of
``shiftwatch.operators.shape.null`` (the table is data, this script is its proof).

    python benchmarks/shape_null.py table [--runs 600] [--seed 20261204]   # rewrites null.py
    python benchmarks/shape_null.py check [--runs 300] [--seed 7]          # fresh null rates

``table``: stationary synthetic streams of eight families (white noise, AR(1) rho 0.5 and
0.9, a noisy resonance AR(2) whose coherence lasts 1 or 3 periods, a sine under noise 0.3 and
1.0, a square wave under AR(1) noise; random phase), one channel, periods 4, 6, 8, 11 and 32
(delay embeddings of d = 4, 6, 8, 11 and 16 coordinates: feature dimensions q = 10, 21, 36,
66, 136), ``--runs`` streams per family and period, each 150 blocks of the detector's
defaults (``block=2``: 300 periods). The block features are the detector's own
(``ShapeDetector`` with the period given and no alarm); the scan statistic ``Z`` is recomputed
from them as the detector computes it, for ``min_blocks`` 2-5 and a window of at most 50
blocks. For each feature dimension, ``min_blocks`` and hazard ``h`` of the grid the threshold
curve ``c(N)`` makes the probability of a first alarm at each scan, given none before, equal
to ``h`` on average over the eight families (each family among its own streams with no alarm
before: pooling the streams instead would let the heavy-tailed families alarm early and leave
the light ones to set the thresholds of old windows, a decreasing ``c(N)`` that no single
family has):

* growing windows (``N = 2 min_blocks .. 49`` blocks since the start): ``c(N)`` solves
  ``mean_f P_f(Z_N > c | no alarm before) = h`` (scans ``N - 2 .. N + 2`` pooled; beyond each
  family's 95% quantile an exponential tail fitted to the excesses, since a 1e-4 tail
  probability of a few thousand values is noise);
* full windows (``N = 50``, sliding): the one ``c`` whose first alarms per scan over the 100
  sliding scans, averaged over the families, among the streams with no alarm before, is
  ``h`` (bisection; extrapolated linearly in ``log h`` where it rests on fewer than 30
  alarms).

``check``: the detector itself (``threshold="null"``) on fresh streams of families the table
never saw (a sum of two harmonics under Student-t noise, an ARMA(2,1) resonance, two-channel
AR(1)), counting alarms per 100 periods against ``false_alarms_per_100_periods``, with 95%
Poisson intervals, and split by the age of the segment (blocks since the start or the last
alarm).

Results: ``benchmarks/results/shape.md`` (section "Threshold from the null").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "operators" / "shape" / "null.py"

FAMILIES = ("white", "ar1_0.5", "ar1_0.9", "ar2_1", "ar2_3", "sine_0.3", "sine_1",
            "square_ar")
#: period -> embedding dimension with the defaults (span 1, dmax 16): 4, 6, 8, 11, 16
PERIODS = (4, 6, 8, 11, 32)
M_GRID = (2, 3, 4, 5)
#: hazards (first alarms per scan); with block=2, 50 scans per 100 periods
H_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1)
MAXB, SLIDE, BLOCK = 50, 100, 2.0


def family(name: str, rng: np.random.Generator, n: int, P: int, c: int = 1) -> np.ndarray:
    """One stationary stream (n, c) of a family."""
    from scipy import signal

    t = np.arange(n)[:, None]
    ph = rng.uniform(0, 2 * np.pi, size=c)
    e = rng.normal(size=(n, c))
    if name == "white":
        return e
    if name.startswith("ar1_"):
        return signal.lfilter([1], [1, -float(name[4:])], e, axis=0)
    if name.startswith("ar2_"):  # resonance at P, coherence ~ k periods (r^(kP) = 1/e)
        r = float(np.exp(-1.0 / (int(name[4:]) * P)))
        return signal.lfilter([1], [1, -2 * r * np.cos(2 * np.pi / P), r * r], e, axis=0)
    if name.startswith("sine_"):
        return np.sin(2 * np.pi * t / P + ph) + float(name[5:]) * e
    if name == "square_ar":
        return np.sign(np.sin(2 * np.pi * t / P + ph)) + 0.5 * signal.lfilter(
            [1], [1, -0.7], e, axis=0)
    # fresh families for the check (never used by the table)
    if name == "harmonics_t":
        x = np.sin(2 * np.pi * t / P + ph) + 0.5 * np.sin(4 * np.pi * t / P + 2 * ph)
        return x + 0.4 * rng.standard_t(5, size=(n, c))
    if name == "arma21":
        r = 0.9
        return signal.lfilter([1, 0.5], [1, -2 * r * np.cos(2 * np.pi / P), r * r], e, axis=0)
    if name == "ar1_0.7":
        return signal.lfilter([1], [1, -0.7], e, axis=0)
    raise KeyError(name)


def block_features(y: np.ndarray, P: int, nblocks: int) -> np.ndarray:
    """The detector's block features of ``y`` (no alarm: threshold out of reach)."""
    from shiftwatch.operators.shape import kernels as K
    from shiftwatch.operators.shape.detector import ShapeDetector

    det = ShapeDetector(threshold=1e300, period=P, max_blocks=nblocks)
    det.update_many(y)
    return det._feats[:det._ist[K.NF]].copy()


def z_paths(feats: np.ndarray, m: int) -> np.ndarray:
    """Z of every scan of a stream whose block features are ``feats`` (window <= MAXB)."""
    from shiftwatch.operators.shape import kernels as K

    nb = feats.shape[0]
    out = np.empty(nb - 2 * m + 1)
    for n in range(2 * m, nb + 1):
        lo = max(0, n - MAXB)
        out[n - 2 * m] = K.zscan(feats[lo:n], n - lo, m, 0.01)[1]
    return out


def simulate(P: int, runs: int, seed: int, families=FAMILIES, ms=M_GRID) -> dict:
    """Z paths {m: (len(families) * runs, scans)} for one period (family by family)."""
    nb = MAXB + SLIDE
    B = int(round(BLOCK * P))
    n = (nb + 1) * B + 64 + P
    out: dict[int, list] = {m: [] for m in ms}
    for fi, name in enumerate(families):
        rng = np.random.default_rng([seed, P, fi])
        for _ in range(runs):
            f = block_features(family(name, rng, n, P), P, nb)[:nb]
            for m in ms:
                out[m].append(z_paths(f, m))
    return {m: np.array(v) for m, v in out.items()}


def _tail(x: np.ndarray, pu: float = 0.05):
    """P(X > c) as a function of c: empirical up to the 1 - pu quantile u of x, beyond it an
    exponential tail ``pu exp(-(c - u) / beta)`` (beta the mean excess over u), since a 1e-4
    tail probability of a few thousand values is noise."""
    xs = np.sort(x)
    u = float(np.quantile(xs, 1 - pu))
    exc = xs[xs > u] - u
    beta = max(float(exc.mean()), 1e-9) if len(exc) else 1e-9

    def prob(c: float) -> float:
        if c <= u:
            return 1.0 - np.searchsorted(xs, c, side="right") / len(xs)
        return pu * float(np.exp(-(c - u) / beta))
    return prob


def _solve(f, h: float, hi: float = 1e3) -> float:
    """The c with f(c) = h for a decreasing f (bisection)."""
    lo = 0.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > h else (lo, mid)
    return hi


def curve(Z: np.ndarray, fam: np.ndarray, m: int, h: float) -> tuple[list[float], np.ndarray]:
    """c(N) for N = 2m .. MAXB - 1 (growing windows) at hazard h: at each N the probability
    of a first alarm, averaged over the families (each among its own streams with no alarm
    before; a family with fewer than 20 such values left out), is h. Also returns which
    streams had no alarm."""
    grow = MAXB - 2 * m  # scans with N < MAXB
    alive = np.ones(len(Z), dtype=bool)
    fams = np.unique(fam)
    c: list[float] = []
    for s in range(grow):
        lo, hi = max(0, s - 2), min(grow, s + 3)
        # a family all of whose streams alarmed already (large h) no longer counts
        probs = [_tail(x) for x in (Z[alive & (fam == f), lo:hi].ravel() for f in fams)
                 if len(x) >= 20]
        if not probs:  # every family alarmed already: keep the last threshold
            c.append(c[-1] if c else 1.0)
        else:
            c.append(_solve(lambda v, probs=probs: float(np.mean([p(v) for p in probs])), h))
        alive &= Z[:, s] <= c[-1]
    return c, alive


def _rate(S: np.ndarray, fam: np.ndarray, c: float) -> tuple[float, int]:
    """First alarms per scan over full windows, averaged over the families, and their count."""
    over = S > c
    hit = over.any(1)
    first = np.where(hit, over.argmax(1) + 1, S.shape[1])
    rates = [hit[fam == f].sum() / first[fam == f].sum() for f in np.unique(fam)
             if (fam == f).sum()]
    return float(np.mean(rates)), int(hit.sum())


def _sliding(S: np.ndarray, fam: np.ndarray, h: float) -> tuple[float, int]:
    """The full-window threshold at hazard h (bisection) and the alarms it rests on."""
    c = _solve(lambda v: _rate(S, fam, v)[0], h, float(S.max()) + 1.0)
    return c, _rate(S, fam, c)[1]


def table(runs: int, seed: int, periods=PERIODS, ms=M_GRID, hs=H_GRID,
          families=FAMILIES, cache: str | None = None) -> dict:
    """{"q": [...], "m": [...], "h": [...], "c": c[qi][mi][hi] = curve over N = 2m..MAXB}."""
    qs, cs = [], []
    fam = np.repeat(np.arange(len(families)), runs)
    for P in periods:
        t0 = time.time()
        cached = Path(cache) / f"z_{P}_{runs}_{seed}.npz" if cache else None
        if cached is not None and cached.exists():
            Zm = {int(k[1:]): v for k, v in np.load(cached).items()}
        else:
            Zm = simulate(P, runs, seed, families, ms)
            if cached is not None:
                np.savez(cached, **{f"m{k}": v for k, v in Zm.items()})
        d = block_features(family("white", np.random.default_rng(0), 20 * P * 4, P), P,
                           8).shape[1]
        qs.append(d)
        rows = []
        for m in ms:
            Z = Zm[m]
            grow = MAXB - 2 * m
            per_h = []
            for h in hs:
                c, alive = curve(Z, fam, m, h)
                # full windows: the streams with no alarm in the growing ones (a family with
                # fewer than 20 of them left out; all streams if no family has 20)
                keep = np.zeros(len(Z), dtype=bool)
                for f in np.unique(fam):
                    if (alive & (fam == f)).sum() >= 20:
                        keep |= alive & (fam == f)
                if not keep.any():  # none left (a large h): all streams
                    keep[:] = True
                per_h.append((c, *_sliding(Z[keep, grow:], fam[keep], h)))
            # a full-window threshold resting on < 30 alarms: extrapolated linearly in log h
            # from the two smallest h whose thresholds do not
            good = [i for i, v in enumerate(per_h) if v[2] >= 30]
            slide = [v[1] for v in per_h]
            if len(good) >= 2:
                i0, i1 = good[0], good[1]
                lh = np.log(hs)
                slope = (slide[i1] - slide[i0]) / (lh[i1] - lh[i0])
                for i in range(i0):
                    slide[i] = slide[i0] + slope * (lh[i] - lh[i0])
            rows.append([[round(float(v), 2) for v in c + [slide[i]]]
                         for i, (c, _, _) in enumerate(per_h)])
        cs.append(rows)
        print(f"P={P} q={d}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return {"q": qs, "m": list(ms), "h": list(hs), "c": cs}


#: the small version the tests re-derive (bit for bit) and the seed of the full table
CHECK = {"runs": 10, "seed": 3, "periods": (6,), "ms": (3,), "hs": (1e-3, 1e-2)}
SEED = 20261204


def _fmt(c: list, q: list, m: list) -> str:
    """The nested table, wrapped at 100 characters, one curve per block of lines."""
    import textwrap

    out = ["["]
    for qi, by_m in enumerate(c):
        out.append(f"    [  # q = {q[qi]}")
        for mi, by_h in enumerate(by_m):
            out.append(f"        [  # min_blocks = {m[mi]}")
            for curve_ in by_h:
                body = textwrap.fill(", ".join(repr(v) for v in curve_), width=98,
                                     initial_indent=" " * 12 + "[",
                                     subsequent_indent=" " * 13)
                out.append(body + "],")
            out.append("        ],")
        out.append("    ],")
    out.append("]")
    return "\n".join(out)


def write(full: dict, check: dict, runs: int, seed: int) -> None:
    fmt = _fmt(full["c"], full["q"], full["m"])
    fmt_check = _fmt(check["c"], check["q"], check["m"])
    head = '"""The null threshold table of the ``shape`` detector (generated: do not edit).'
    OUT.write_text(head + f'''

Written by ``python benchmarks/shape_null.py table --runs {runs} --seed {seed}`` (the
derivation is that script's docstring and ``benchmarks/results/shape.md``). ``C[qi][mi][hi]``
is the threshold curve over ``N = 2 m .. {MAXB}`` blocks (the last entry: full windows) for
feature dimension ``Q[qi]``, ``min_blocks`` ``M[mi]`` and first-alarm hazard per scan
``H[hi]``: under the synthetic null (eight stationary families), a stream whose scan has not
alarmed before alarms at the next scan with probability ``H[hi]`` on average over the
families, however young or old its segment.
:func:`threshold_curve` interpolates it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["threshold_curve", "Q", "M", "H", "C", "MAXB"]

MAXB = {MAXB}
Q = {full["q"]!r}
M = {full["m"]!r}
H = {full["h"]!r}
C = {fmt}

#: the small table the tests re-derive with ``table(**CHECK)``
CHECK_C = {fmt_check}


def threshold_curve(q: int, m: int, max_blocks: int, hazard: float) -> np.ndarray:
    """Thresholds ``c[N]`` for ``N = 0 .. max_blocks`` blocks in the window.

    Linear in ``log q`` between the tabulated feature dimensions (clamped outside) and in
    ``log hazard`` (extrapolated outside ``H``); ``min_blocks`` outside ``M`` takes the
    nearest. A window of more than {MAXB} blocks uses the full-window value from {MAXB} on.
    """
    mi = int(np.argmin([abs(v - m) for v in M]))
    mt = M[mi]
    lq = np.log(np.clip(q, Q[0], Q[-1]))
    lqs = np.log(Q)
    j = int(np.clip(np.searchsorted(lqs, lq) - 1, 0, len(Q) - 2))
    wq = (lq - lqs[j]) / (lqs[j + 1] - lqs[j])
    lh = np.log(hazard)
    lhs = np.log(H)
    k = int(np.clip(np.searchsorted(lhs, lh) - 1, 0, len(H) - 2))
    wh = (lh - lhs[k]) / (lhs[k + 1] - lhs[k])
    tab = np.array([C[j][mi], C[j + 1][mi]])  # (2, len(H), MAXB - 2 m + 1)
    at_q = (1 - wq) * tab[0] + wq * tab[1]
    cur = (1 - wh) * at_q[k] + wh * at_q[k + 1]
    out = np.full(max(max_blocks, MAXB) + 1, np.inf)
    out[2 * mt:MAXB + 1] = cur
    out[MAXB + 1:] = cur[-1]
    # a nearest-m table for another m: its first entries stand for N = 2 m .. 2 mt
    out[2 * m:2 * mt] = cur[0]
    return np.maximum(out[:max_blocks + 1], 1.0)
''')


def null_alarms(name: str, P: int, c: int, runs: int, seed, rate: float,
                periods: float = 300.0, **params) -> tuple[int, int, float]:
    """(alarms, alarms within 10 blocks of their segment's start, periods watched) of the
    detector (``threshold="null"`` at ``rate``, the period given) on ``runs`` stationary
    streams of a family."""
    from shiftwatch.operators.shape.detector import ShapeDetector

    rng = np.random.default_rng(seed)
    n = int(periods * P)
    B = int(round(BLOCK * P))
    alarms = young = 0
    for _ in range(runs):
        params = {"threshold": "null", **params}
        det = ShapeDetector(period=P, false_alarms_per_100_periods=rate, **params)
        a = det.update_many(family(name, rng, n, P, c))[0]
        prev = 0
        for p in np.flatnonzero(a):  # segment start: the stream's or the last alarm's
            young += (p - prev) < (10 + 1) * B
            prev = p
        alarms += int(a.sum())
    return alarms, young, runs * n / P / 100


def check(runs: int, seed: int, rate: float) -> list[str]:
    from scipy import stats

    def ci(k: int, per: float) -> str:
        lo = stats.chi2.ppf(0.025, 2 * k) / 2 if k else 0.0
        hi = stats.chi2.ppf(0.975, 2 * k + 2) / 2
        return f"{k / per:.3f} [{lo / per:.3f}, {hi / per:.3f}]"

    lines = ["| stream | P | 100 periods | alarms | per 100 periods [95% interval] | "
             "alarms within 10 blocks of their segment's start |",
             "| --- | ---: | ---: | ---: | --- | ---: |"]

    def row(label, P, k, y, per):
        lines.append(f"| {label} | {P} | {per:.0f} | {k} | {ci(k, per)} | {y} |")
        print(lines[-1], flush=True)

    # the table's eight families at a period it never saw (9: d = 9, q = 45), fresh seeds:
    # their mean is what the table promises
    tot = [0, 0, 0.0]
    for fi, name in enumerate(FAMILIES):
        k, y, per = null_alarms(name, 9, 1, runs, [seed, 9, fi], rate)
        row(name, 9, k, y, per)
        tot = [tot[0] + k, tot[1] + y, tot[2] + per]
    row("**the eight families (mean)**", 9, *tot)
    # families the table never saw: what one stream may see
    for name, c in (("harmonics_t", 1), ("arma21", 1), ("ar1_0.7", 2)):
        for P in (5, 9, 20):
            row(f"{name} (c={c})", P, *null_alarms(name, P, c, runs, [seed, P, c, 1], rate))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["table", "check"])
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--cache", default=None,
                    help="table: a folder keeping the simulated Z paths (re-runs are quick)")
    ap.add_argument("--rate", type=float, default=None,
                    help="false alarms per 100 periods for check (default: the detector's)")
    args = ap.parse_args(argv)
    t0 = time.time()
    if args.what == "table":
        runs = args.runs or 600
        seed = SEED if args.seed is None else args.seed
        full = table(runs, seed, cache=args.cache)
        write(full, table(**CHECK), runs, seed)
        print(f"wrote {OUT} ({time.time() - t0:.0f} s)")
    else:
        import inspect

        from shiftwatch.operators.shape.detector import ShapeDetector

        rate = args.rate or inspect.signature(ShapeDetector).parameters[
            "false_alarms_per_100_periods"].default
        lines = check(args.runs or 300, 7 if args.seed is None else args.seed, rate)
        print(f"\n`python benchmarks/shape_null.py {' '.join(sys.argv[1:])}` "
              f"({time.strftime('%Y-%m-%d %H:%M')}, {time.time() - t0:.0f} s)")
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
