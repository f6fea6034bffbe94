#!/usr/bin/env python
"""ClaSS peer: run claspy's streaming ClaSS segmenter on series read from stdin.

Runs INSIDE the peer virtual environment (stdlib + numpy + claspy only).

Input (stdin, JSON)::

    {"series": [{"name": str, "values": [float, ...] or [[float, ...], ...],
                 "params": {...}}],
     "params": {...}}            # optional defaults for every series

Output (stdout, JSON)::

    {"claspy_version": ..., "numba_version": ..., "numpy_version": ..., "python": ...,
     "jit_warmup_s": float | null,
     "results": [{"name", "n", "change_points", "reported_at", "wall_s", "cpu_s",
                  "records_per_s", "params", "window_size_used", "can_detect",
                  "status", "error", "warnings"}]}

Protocol. The series is fed one value at a time with ``StreamingClaSPSegmentation.update(x)``
(the streaming API; no offline/batch call). With ``log_cps=True`` claspy appends each change
point it accepts to ``.change_points`` as a global 0-based position; it is read after every
update, and the index of the value whose update produced it is kept in ``reported_at``.
``wall_s`` times the feeding loop only (``time.perf_counter``); construction of the segmenter,
imports, JSON and the one-off JIT warm-up are outside it.

Parameters. Every keyword of ``StreamingClaSPSegmentation.__init__`` may be given; the ones
not given take claspy's defaults, read from its signature and written back in ``params``.
Two peer-level keys:

* ``warmup_fraction`` (default 0.25): when ``n_warmup`` is not given it is
  ``max(MIN_WARMUP, int(warmup_fraction * n))``, capped at ``n`` and at ``n_timepoints``
  (claspy itself takes ``min(n_timepoints, n_warmup)``).
* ``multivariate`` (default ``"pc1_warmup"``): rule for 2-d ``values`` (ClaSS is univariate):
  each channel is standardised with the mean and standard deviation of the warm-up prefix
  only, and the stream is projected on the first principal component of that standardised
  prefix (sign fixed so that the largest loading is positive). Only the warm-up is used to
  build the projection, so no future value is looked at. ``"channel:K"`` uses channel K.

Short series. claspy's warm-up buffer is filled with -inf until ``n_warmup`` values arrived,
so ``n_warmup`` is never above ``n``. The SuSS window-size search needs at least 10 values
(its lower bound ``lbound=10``; below that it warns and uses the whole buffer), so a series
whose warm-up would be shorter than ``MIN_WARMUP = 17`` values is not run: it is reported with
``status="too_short"`` and no change points. (17, not SuSS's nominal 10: SuSS's exponential
search starts at window 16 and scores a window w only on a buffer longer than w; on a buffer of
16 values or fewer it never stops and raises ``OverflowError``. On longer buffers it can still
fail the same way when no window shorter than the buffer passes its threshold; the peer then
reports ``status="error"`` with the exception, and no change points.) With
``warmup_fraction`` 0.25, series of 17 to 71 values get a 17-value warm-up. ClaSS then
reports nothing until
``10 * window_size`` values were ingested and the k-NN profile spans ``10 * window_size``
values (two segments of at least ``5 * window_size``); ``can_detect`` says whether the series
is long enough for that to happen at all, given the window size SuSS chose.
"""

from __future__ import annotations

import inspect
import json
import math
import platform
import sys
import time
import traceback
import warnings

import numpy as np

MIN_WARMUP = 17
PEER_KEYS = ("warmup_fraction", "multivariate")


def _claspy_defaults():
    from claspy.streaming.segmentation import StreamingClaSPSegmentation

    sig = inspect.signature(StreamingClaSPSegmentation.__init__)
    return {
        k: p.default
        for k, p in sig.parameters.items()
        if k != "self" and p.default is not inspect.Parameter.empty
    }


def _to_univariate(values: np.ndarray, n_warmup: int, rule: str) -> tuple[np.ndarray, dict]:
    if values.ndim == 1:
        return values.astype(np.float64), {}
    if values.ndim != 2:
        raise ValueError(f"values must be 1-d or 2-d, got shape {values.shape}")
    if rule.startswith("channel:"):
        k = int(rule.split(":", 1)[1])
        return values[:, k].astype(np.float64), {"rule": rule}
    if rule != "pc1_warmup":
        raise ValueError(f"unknown multivariate rule {rule!r}")
    prefix = values[:n_warmup].astype(np.float64)
    mu = prefix.mean(axis=0)
    sd = prefix.std(axis=0)
    sd[sd == 0] = 1.0  # a channel constant in the warm-up contributes nothing
    z = (prefix - mu) / sd
    _, s, vt = np.linalg.svd(z, full_matrices=False)
    w = vt[0]
    if w[np.argmax(np.abs(w))] < 0:
        w = -w
    explained = float(s[0] ** 2 / np.sum(s**2)) if np.sum(s**2) > 0 else math.nan
    proj = ((values.astype(np.float64) - mu) / sd) @ w
    return proj, {
        "rule": "pc1_warmup",
        "loadings": [round(float(x), 6) for x in w],
        "explained_variance_ratio_warmup": round(explained, 6),
    }


def _jsonable(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


def run_one(item: dict, defaults: dict, common: dict) -> dict:
    from claspy.streaming.segmentation import StreamingClaSPSegmentation

    name = item.get("name")
    params_in = {**common, **(item.get("params") or {})}
    values = np.asarray(item["values"], dtype=np.float64)
    n = int(values.shape[0])
    out = {"name": name, "n": n, "change_points": [], "reported_at": [], "wall_s": None,
           "cpu_s": None, "records_per_s": None, "window_size_used": None,
           "can_detect": None, "status": "ok", "error": None, "warnings": []}

    warmup_fraction = float(params_in.get("warmup_fraction", 0.25))
    rule = str(params_in.get("multivariate", "pc1_warmup"))
    kwargs = {k: v for k, v in params_in.items() if k not in PEER_KEYS}
    unknown = set(kwargs) - set(defaults)
    if unknown:
        raise ValueError(f"unknown StreamingClaSPSegmentation arguments: {sorted(unknown)}")
    kwargs.setdefault("log_cps", True)
    if not kwargs["log_cps"]:
        raise ValueError("log_cps must be True: the peer reads the logged change points")
    n_timepoints = int(kwargs.get("n_timepoints", defaults["n_timepoints"]))
    if "n_warmup" not in kwargs:
        kwargs["n_warmup"] = max(MIN_WARMUP, int(warmup_fraction * n))
        warmup_rule = f"max({MIN_WARMUP}, int({warmup_fraction} * n)), capped at n and n_timepoints"
    else:
        warmup_rule = "given"
    kwargs["n_warmup"] = int(min(kwargs["n_warmup"], n, n_timepoints))
    used = {**defaults, **kwargs}
    out["params"] = {
        **{k: _jsonable(v) for k, v in used.items()},
        "warmup_fraction": warmup_fraction,
        "warmup_rule": warmup_rule,
    }
    if values.ndim == 2:
        out["params"]["multivariate"] = rule
        out["channels"] = int(values.shape[1])

    if kwargs["n_warmup"] < MIN_WARMUP:
        out["status"] = "too_short"
        out["error"] = (f"n={n}: warm-up of {kwargs['n_warmup']} < {MIN_WARMUP} values "
                        "(SuSS needs more than 16)")
        return out

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            x, proj_info = _to_univariate(values, kwargs["n_warmup"], rule)
            if proj_info:
                out["projection"] = proj_info
            seg = StreamingClaSPSegmentation(**kwargs)
            cps = seg.change_points
            reported_at = []
            seen = 0
            update = seg.update
            xs = x.tolist()
            c0 = time.process_time()
            t0 = time.perf_counter()
            for i, v in enumerate(xs):
                update(v)
                if len(cps) != seen:
                    reported_at.extend([i] * (len(cps) - seen))
                    seen = len(cps)
            wall = time.perf_counter() - t0
            cpu = time.process_time() - c0
            out["change_points"] = [int(c) for c in cps]
            out["reported_at"] = reported_at
            out["wall_s"] = wall
            out["cpu_s"] = cpu
            out["records_per_s"] = n / wall if wall > 0 else None
            if isinstance(seg.window_size, (int, np.integer)):
                w = int(seg.window_size)
                out["window_size_used"] = w
                lag = w + w // 2 + int(used["k_neighbours"])
                out["can_detect"] = bool(n >= 10 * w and n - lag >= 10 * w)
            bad = [c for c in out["change_points"] if not 0 <= c < n]
            if bad:
                out["warnings"].append(f"change points outside [0, n): {bad}")
        except Exception as exc:  # report, do not kill the other series
            out["status"] = "error"
            out["error"] = f"{type(exc).__name__}: {exc}"
            out["traceback"] = traceback.format_exc()
    msgs = []
    for w_ in caught:
        m = f"{w_.category.__name__}: {w_.message}"
        if m not in msgs:
            msgs.append(m)
    out["warnings"].extend(msgs)
    return out


def jit_warmup() -> float:
    """Compile (or load from numba's cache) claspy's jitted functions outside any timing."""
    from claspy.streaming.segmentation import StreamingClaSPSegmentation

    rng = np.random.default_rng(0)
    t = np.arange(3000)
    x = np.where(t < 1500, np.sin(2 * np.pi * t / 25), np.sign(np.sin(2 * np.pi * t / 40)))
    x = x + 0.1 * rng.standard_normal(t.shape[0])
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        seg = StreamingClaSPSegmentation(n_timepoints=3000, n_warmup=750, log_cps=True)
        for v in x.tolist():
            seg.update(v)
    return time.perf_counter() - t0


def main() -> int:
    doc = json.load(sys.stdin)
    from importlib.metadata import version

    import claspy  # noqa: F401  (version below)
    import numba

    defaults = _claspy_defaults()
    common = doc.get("params") or {}
    do_warm = bool(doc.get("jit_warmup", True))
    warm = jit_warmup() if do_warm else None
    results = [run_one(item, defaults, common) for item in doc["series"]]
    json.dump({
        "claspy_version": version("claspy"),
        "numba_version": numba.__version__,
        "numpy_version": np.__version__,
        "python": platform.python_version(),
        "claspy_defaults": {k: _jsonable(v) for k, v in defaults.items()},
        "jit_warmup_s": warm,
        "results": results,
    }, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
