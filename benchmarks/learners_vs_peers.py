"""The continual learners beside River's learners, on the same streams in the same run
(issue 35, build 5).

Arms (all test-then-train, one pass, the same records and seeds):

* ``hare-tortoise``: ``shiftwatch.operators.create("hare-tortoise", in_dim=40, n_classes=10,
  seed=s)`` with the operator's defaults *as they are when the script runs* (read from its
  signature and written to the results), fed through ``process_batch`` in micro-batches of
  256 records ``{"value": [...], "y": int}``.
* ``cila``: ``create("cila", seed=s)``, its defaults, the same records and micro-batches. The
  streams carry no ``task`` field, so with its default ``boundary="auto"`` task boundaries
  come from the first sight of a new label (a label permutation brings no new label).
* ``plain online MLP``: 40-256-256-10 ReLU, AdamW lr 1e-3 (weight decay 0.01, torch's
  default), batch 32, no replay, no clipping, no resets: ``HareTortoise(method="warm",
  buffer_size=0, clip_norm=None, weight_decay=0.01, ...)`` as ``benchmarks/hare_tortoise.py``,
  with the architecture, learning rate, batch size, replay ratio and every reset mechanism the
  operator has (``reset_on``, ``reset_every``, ``reset_every_records``) given explicitly, so
  that a change of the operator's defaults does not change this arm. Same feeding.
* ``River ARF``: ``river.forest.ARFClassifier(seed=s)`` (defaults: 10 trees, ADWIN drift and
  warning detectors), ``predict_one`` then ``learn_one`` on ``{feature index: value}``.
* ``River GaussianNB``: ``river.naive_bayes.GaussianNB()``, same protocol: the cheap baseline a
  River user tries first; chosen over ``OneVsRestClassifier(LogisticRegression())`` because it
  is natively multi-class and has no learning rate or feature scaling to choose (a logistic
  regression on the raw mnist1d features would need both). It has no forgetting, so it is
  expected to suffer after label permutations; that is what a user would get.
* ``deep-river MLP``: ``deep_river.classification.Classifier`` around the same 40-256-256-10
  MLP, cross-entropy, Adam lr 1e-3 (deep-river's default lr), one ``learn_one`` step per
  record, in its own venv (``benchmarks/peers/deep_river_env.py``: every deep-river release
  pins torch < 2.6, so deep-river 0.3.4 is installed with ``--no-deps`` next to this machine's
  torch 2.13.0 CPU build; pip's refusal of the pinned install is recorded in the results).

Streams (:func:`make_streams`; mnist1d, 40 features, 10 classes, seeds 0, 1, 2 by default):
for each seed, ``mnist1d.data.make_dataset`` with ``get_dataset_args()``, ``num_samples =
6000`` and ``seed = s`` (fresh generated signals per seed; training and test parts pooled),
put in a random order drawn from ``numpy.random.default_rng([s, 3505])`` (no record repeats):

* ``stationary``: the 6,000 records; score (a): prequential accuracy on records 3,000..5,999;
* ``permuted``: the same 6,000 records; at records 2,000 and 4,000 the labels of all later
  records go through a fresh random permutation of the 10 classes without fixed points
  (every class changes its label); scores (b): accuracy over the last 1,000 records of each
  changed segment (3,000..3,999 and 5,000..5,999), mean of the two, and (c): prequential
  accuracy over the whole stream.

(d) records/s: records of both streams / seconds spent in the learner's calls (``process_batch``
for the operators; ``predict_one`` + ``learn_one`` for River and deep-river; building the
record dicts is outside), per seed; the median over seeds is reported. A prediction of
``None`` (before any label was seen) counts as a miss.

Usage::

    python benchmarks/learners_vs_peers.py [--seeds 0 1 2] [--no-deep-river] [--out PREFIX]

writes ``benchmarks/results/learners_vs_peers.md`` and ``.json`` (or ``PREFIX.md/.json``).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

torch.set_num_threads(1)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE / "peers"))

N = 6000
SEGMENT = 2000
CHUNK = 256
N_CLASSES = 10
IN_DIM = 40
HT = "hare-tortoise"
CILA = "cila"
PLAIN = "plain online MLP"
ARF = "River ARF"
GNB = "River GaussianNB"
DR = "deep-river MLP"
ARMS = (HT, CILA, PLAIN, ARF, GNB, DR)
LOAD_START = round(os.getloadavg()[0], 2)


# ----------------------------------------------------------------------------------------
# Streams
# ----------------------------------------------------------------------------------------

def derangement(k: int, rng: np.random.Generator) -> np.ndarray:
    """A random permutation of ``range(k)`` without fixed points."""
    while True:
        p = rng.permutation(k)
        if not np.any(p == np.arange(k)):
            return p


def make_streams(seed: int) -> dict[str, dict[str, Any]]:
    """The two streams of one seed: ``{"stationary": {...}, "permuted": {...}}``, each with
    ``x`` (6000 x 40 float32), ``y`` (6000 int64) and ``changes`` (record indices where the
    labels are permuted afresh). See the module docstring."""
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples = N
    args.seed = seed
    d = make_dataset(args)
    x = np.concatenate([d["x"], d["x_test"]]).astype(np.float32)
    y = np.concatenate([d["y"], d["y_test"]]).astype(np.int64)
    rng = np.random.default_rng([seed, 3505])
    order = rng.permutation(len(y))[:N]
    x, y = x[order], y[order]
    changes = list(range(SEGMENT, N, SEGMENT))
    y_perm = y.copy()
    for start in changes:
        y_perm[start:] = derangement(N_CLASSES, rng)[y_perm[start:]]
    return {"stationary": {"x": x, "y": y, "changes": []},
            "permuted": {"x": x, "y": y_perm, "changes": changes}}


def scores(kind: str, hits: np.ndarray) -> dict[str, Any]:
    if kind == "stationary":
        return {"second_half": float(hits[N // 2:].mean()), "overall": float(hits.mean())}
    half = SEGMENT // 2
    seg = [float(hits[s + half:s + SEGMENT].mean()) for s in range(SEGMENT, N, SEGMENT)]
    return {"after_changes": float(np.mean(seg)), "after_changes_per_segment": seg,
            "overall": float(hits.mean())}


# ----------------------------------------------------------------------------------------
# Arms
# ----------------------------------------------------------------------------------------

def plain_params() -> dict[str, Any]:
    """The plain online MLP's parameters, with every reset mechanism the operator has off."""
    from shiftwatch.operators.learners.hare_tortoise import HareTortoise

    sig = inspect.signature(HareTortoise.__init__).parameters
    p: dict[str, Any] = {"method": "warm", "buffer_size": 0, "clip_norm": None,
                         "weight_decay": 0.01, "hidden": [256, 256], "lr": 1e-3,
                         "batch_size": 32, "replay_ratio": 1}
    for off in ("reset_on", "reset_every", "reset_every_records", "detector"):
        if off in sig:
            p[off] = None
    return {k: v for k, v in p.items() if k in sig}


def defaults_of(cls: type) -> dict[str, Any]:
    out = {}
    for k, p in inspect.signature(cls.__init__).parameters.items():
        if k == "self" or p.default is inspect.Parameter.empty:
            continue
        v = p.default
        out[k] = list(v) if isinstance(v, tuple) else v
    return out


def run_operator(op: Any, x: np.ndarray, y: np.ndarray) -> tuple[list, float]:
    records = [{"value": v.tolist(), "y": int(c)} for v, c in zip(x, y, strict=True)]
    preds: list = []
    wall = 0.0
    for i in range(0, len(records), CHUNK):
        t = time.perf_counter()
        outs = op.process_batch(records[i:i + CHUNK])
        wall += time.perf_counter() - t
        preds += [o.get("y_pred") for o in outs]
    return preds, wall


def run_river(model: Any, x: np.ndarray, y: np.ndarray) -> tuple[list, float]:
    return run_river_dicts(model, [dict(enumerate(v.tolist())) for v in x], y)


def run_river_dicts(model: Any, xs: list[dict], y: np.ndarray) -> tuple[list, float]:
    """Test-then-train of a River model over feature dicts: the predictions and the seconds
    spent in ``predict_one`` + ``learn_one``."""
    ys = [int(c) for c in y]
    preds: list = []
    t = time.perf_counter()
    for xi, yi in zip(xs, ys, strict=True):
        preds.append(model.predict_one(xi))
        model.learn_one(xi, yi)
    return preds, time.perf_counter() - t


def hits_of(preds: list, y: np.ndarray) -> np.ndarray:
    return np.array([p is not None and int(p) == int(c) for p, c in zip(preds, y, strict=True)])


def run_seed(seed: int, deep_river: bool, log) -> dict[str, Any]:
    """All arms on both streams of one seed."""
    from river import forest, naive_bayes

    from shiftwatch.operators import create
    from shiftwatch.operators.learners.hare_tortoise import HareTortoise

    t0 = time.time()
    streams = make_streams(seed)
    log(f"seed {seed}: streams made ({time.time() - t0:.0f} s)")
    out: dict[str, Any] = {"seed": seed, "arms": {}}
    for kind, s in streams.items():
        x, y = s["x"], s["y"]
        for arm in ARMS[:-1]:
            extra: dict[str, Any] = {}
            if arm == HT:
                op = create(HT, in_dim=IN_DIM, n_classes=N_CLASSES, seed=seed)
                preds, wall = run_operator(op, x, y)
                extra = {"alarm_resets": int(getattr(op, "n_alarm_resets", 0)),
                         "periodic_resets": int(getattr(op, "n_resets", 0))}
            elif arm == CILA:
                op = create(CILA, seed=seed)
                preds, wall = run_operator(op, x, y)
                extra = {"tasks_opened": len(getattr(op, "lambdas", []) or [])}
            elif arm == PLAIN:
                op = HareTortoise(in_dim=IN_DIM, n_classes=N_CLASSES, seed=seed,
                                  **plain_params())
                preds, wall = run_operator(op, x, y)
            elif arm == ARF:
                preds, wall = run_river(forest.ARFClassifier(seed=seed), x, y)
            else:
                preds, wall = run_river(naive_bayes.GaussianNB(), x, y)
            hits = hits_of(preds, y)
            out["arms"].setdefault(arm, {})[kind] = {**scores(kind, hits), "n": len(y),
                                                     "wall_s": wall, **extra}
            log(f"seed {seed} {kind:10s} {arm:18s} {json.dumps(scores(kind, hits))[:90]} "
                f"{len(y) / wall:8.0f} rec/s ({time.time() - t0:.0f} s)")
    if deep_river:
        from deep_river_env import run_deep_river

        try:
            doc = run_deep_river([{"name": k, "x": s["x"].tolist(), "y": s["y"].tolist()}
                                  for k, s in streams.items()], seed)
        except Exception as e:  # noqa: BLE001 - reported as the arm's status
            out["deep_river_error"] = f"{type(e).__name__}: {e}"[-3000:]
            log(f"seed {seed} deep-river failed: {out['deep_river_error'][:500]}")
        else:
            out["deep_river_versions"] = doc["versions"]
            out["deep_river_params"] = doc["params"]
            for r in doc["results"]:
                kind = r["name"]
                hits = hits_of(r["y_pred"], streams[kind]["y"])
                out["arms"].setdefault(DR, {})[kind] = {**scores(kind, hits), "n": r["n"],
                                                        "wall_s": r["wall_s"]}
                log(f"seed {seed} {kind:10s} {DR:18s} {json.dumps(scores(kind, hits))[:90]} "
                    f"{r['records_per_s']:8.0f} rec/s ({time.time() - t0:.0f} s)")
    for r in out["arms"].values():
        n = sum(v["n"] for v in r.values())
        r["records_per_s"] = n / sum(v["wall_s"] for v in r.values())
    return out


# ----------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------

METRICS = (("a", "stationary", "second_half", "stationary: prequential acc., 2nd half"),
           ("b", "permuted", "after_changes", "permuted: acc. over last 1,000 of each changed "
                                               "segment"),
           ("c", "permuted", "overall", "permuted: prequential acc., overall"))


def ci95(values: list[float]) -> tuple[float, float]:
    from scipy import stats

    a = np.asarray(values, dtype=float)
    if len(a) < 2:
        return float(a.mean()), float("nan")
    return float(a.mean()), float(stats.t.ppf(0.975, len(a) - 1) * a.std(ddof=1)
                                  / np.sqrt(len(a)))


def values(rows: list[dict], arm: str, kind: str, key: str) -> list[float] | None:
    if any(arm not in r["arms"] for r in rows):
        return None
    return [r["arms"][arm][kind][key] for r in rows]


def summary(rows: list[dict]) -> dict[str, Any]:
    arms = [a for a in ARMS if all(a in r["arms"] for r in rows)]
    out: dict[str, Any] = {"arms": {}, "paired": {}}
    for arm in arms:
        m = {}
        for tag, kind, key, _ in METRICS:
            mean, half = ci95(values(rows, arm, kind, key))
            m[tag] = {"mean": mean, "ci95": half}
        rates = [r["arms"][arm]["records_per_s"] for r in rows]
        m["d"] = {"median": float(np.median(rates)), "min": float(min(rates)),
                  "max": float(max(rates))}
        out["arms"][arm] = m
    for ref in (HT, CILA):
        if ref not in arms:
            continue
        for arm in arms:
            if arm == ref:
                continue
            d = {}
            for tag, kind, key, _ in METRICS:
                diff = [p - q for p, q in zip(values(rows, ref, kind, key),
                                              values(rows, arm, kind, key), strict=True)]
                mean, half = ci95(diff)
                d[tag] = {"mean": mean, "ci95": half}
            out["paired"].setdefault(ref, {})[arm] = d
    return out


def fmt(m: dict) -> str:
    return f"{m['mean']:.3f} ± {m['ci95']:.3f}"


def fmt_diff(m: dict) -> str:
    s = f"{m['mean']:+.3f} ± {m['ci95']:.3f}"
    lo, hi = m["mean"] - m["ci95"], m["mean"] + m["ci95"]
    return f"**{s}**" if (lo > 0 or hi < 0) else s


def which_to_use(summ: dict) -> str:
    """3-4 plain sentences of advice, each drawn from the numbers of this run."""
    arms = summ["arms"]

    def acc(arm: str, tag: str) -> str:
        return f"{arms[arm][tag]['mean']:.3f}"

    def rate(arm: str) -> str:
        return f"{arms[arm]['d']['median']:,.0f}"

    def diff(ref: str, other: str, tag: str) -> tuple[float, float]:
        d = summ["paired"].get(ref, {}).get(other)
        return (d[tag]["mean"], d[tag]["ci95"]) if d else (float("nan"), float("nan"))

    def said(m: float, h: float) -> str:
        if not np.isfinite(h):
            return f"{m:+.3f}, one seed"
        return f"{m:+.3f} ± {h:.3f}" + (" (interval excludes 0)" if abs(m) > h
                                         else " (within noise)")

    def best(tag: str, among) -> str:
        return max(among, key=lambda a: arms[a][tag]["mean"])

    s = []
    a, b = best("a", arms), best("b", arms)
    if a == b:
        s.append(f"Where accuracy matters and about {rate(a)} records/s per core are enough, "
                 f"use {a}: it was the most accurate arm both on the stationary stream "
                 f"({acc(a, 'a')}) and after the label permutations ({acc(a, 'b')}).")
    else:
        s.append(f"Where accuracy matters, use {a} on a stationary stream ({acc(a, 'a')}, "
                 f"{rate(a)} records/s) and {b} where abrupt changes are expected "
                 f"({acc(b, 'b')} after the permutations, {rate(b)} records/s).")
    river_arms = [x for x in (ARF, GNB) if x in arms]
    if len(river_arms) == 2:
        ra, rb = best("a", river_arms), best("b", river_arms)
        other = {ARF: GNB, GNB: ARF}
        def short(x: str) -> str:
            return x.removeprefix("River ")

        s.append(f"Without PyTorch, River's {short(rb)} is the one to take where the concept "
                 f"changes "
                 f"({acc(rb, 'b')} after the permutations against {acc(other[rb], 'b')})"
                 + (f", and {short(ra)} on a stationary stream ({acc(ra, 'a')} against "
                    f"{acc(other[ra], 'a')}, at {rate(ra)} records/s against "
                    f"{rate(other[ra])})" if ra != rb else "") + ".")
    if HT in arms and PLAIN in arms:
        slow = ", ".join(f"{k} {rate(k)}" for k in arms if k not in (HT, PLAIN, CILA))
        ma, ha = diff(HT, PLAIN, "a")
        mb, hb = diff(HT, PLAIN, "b")
        if np.isfinite(hb) and mb - hb > 0:
            verdict = "so hare-tortoise is the one to take where the stream drifts"
        elif np.isfinite(hb) and mb + hb < 0:
            verdict = "so the plain MLP is the better of the two"
        elif np.isfinite(ha) and ma - ha > 0:
            verdict = ("so hare-tortoise's defaults are measurably above the plain MLP on the "
                       "stationary stream, and after the changes not measurably different with "
                       "these seeds")
        else:
            verdict = ("so hare-tortoise's defaults buy nothing measurable over the plain MLP "
                       "on these streams")
        s.append(f"Where throughput matters, the micro-batched MLPs are the fast ones (records/s: "
                 f"plain online MLP {rate(PLAIN)}, hare-tortoise {rate(HT)}; {slow}); "
                 f"hare-tortoise minus the plain MLP was {said(ma, ha)} on the stationary "
                 f"stream and {said(mb, hb)} after the changes, {verdict}.")
    if CILA in arms and PLAIN in arms:
        ma, ha = diff(CILA, PLAIN, "a")
        mb, hb = diff(CILA, PLAIN, "b")
        below = all(np.isfinite(h) and m + h < 0 for m, h in ((ma, ha), (mb, hb)))
        s.append(f"cila, fed without task ids, minus the plain MLP: {said(ma, ha)} (stationary) "
                 f"and {said(mb, hb)} (after changes), at {rate(CILA)} records/s"
                 + ("; these streams give no reason to pick it where no task ids are given."
                    if below else "."))
    return " ".join(s)


def git_state() -> dict[str, Any]:
    def run(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, cwd=HERE.parent, capture_output=True, text=True,
                                  check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return ""
    dirty = run("git", "status", "--porcelain", "--", "operators/learners")
    return {"commit": run("git", "rev-parse", "HEAD").strip(),
            "uncommitted_learner_files": [ln[3:] for ln in dirty.splitlines() if ln.strip()]}


def environment() -> dict[str, Any]:
    import river
    import scipy

    from shiftwatch.operators.learners.cila import CILA as CilaCls
    from shiftwatch.operators.learners.hare_tortoise import HareTortoise

    try:
        from importlib.metadata import version
        mnist1d_version = version("mnist1d")
    except Exception:  # noqa: BLE001
        mnist1d_version = "?"
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{os.cpu_count()} cores ({platform.machine()}, {platform.platform()}, "
                       f"shared with other jobs)",
            "python": platform.python_version(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "numpy": np.__version__,
            "scipy": scipy.__version__, "river": river.__version__,
            "mnist1d": mnist1d_version, "git": git_state(),
            "loadavg_start": LOAD_START,
            "defaults": {HT: defaults_of(HareTortoise), CILA: defaults_of(CilaCls)},
            "plain_params": plain_params()}


def pip_error(text: str | None) -> str:
    """pip's refusal, shortened to the lines that say why."""
    if not text:
        return "see benchmarks/peers/deep_river_env.py"
    parts = [p.strip() for p in text.split(" / ")]
    keep = [p for p in parts if "depends on" in p or p.startswith("ERROR: Cannot install")]
    return "pip: " + "; ".join(f"`{p}`" for p in keep or parts)


def markdown(doc: dict) -> str:
    env, summ = doc["environment"], doc["summary"]
    arms = summ["arms"]
    dr = doc.get("deep_river", {})
    lines = [
        "# The continual learners beside River's learners (issue 35, build 5)",
        "",
        f"Command: `{doc['command']}`  ",
        f"Date: {env['date']}; {doc['seconds']:.0f} s of wall time for the whole run.  ",
        f"Machine: {env['machine']}; Python {env['python']}.  ",
        f"Main environment: torch {env['torch']} ({env['torch_threads']} intra-op thread), "
        f"numpy {env['numpy']}, river {env['river']}, mnist1d {env['mnist1d']}.  ",
    ]
    if dr.get("versions"):
        v = dr["versions"]
        lines.append(f"deep-river venv (`~/.cache/shiftwatch-peers/deep-river`): deep-river "
                     f"{v.get('deep_river')}, torch {v.get('torch')}, river {v.get('river')}, "
                     f"numpy {v.get('numpy')}, pandas {v.get('pandas')}.  ")
    dirty = env["git"]["uncommitted_learner_files"]
    lines.append(f"Code: commit `{env['git']['commit'][:12]}`"
                 + (f", with uncommitted changes to {', '.join(dirty)}" if dirty else "") + ".")
    lines += [
        "",
        "Streams: mnist1d (40 features, 10 classes), for each seed "
        "`make_dataset(get_dataset_args())` with `num_samples=6000` and `seed=s`, train and test "
        "parts pooled, in a random order (no record repeats). *Stationary*: the 6,000 records. "
        "*Permuted*: the same records, labels permuted afresh (a permutation without fixed "
        "points) at records 2,000 and 4,000. All arms see the same records, test-then-train, "
        f"one pass; seeds {', '.join(str(r['seed']) for r in doc['rows'])}.",
        "",
        "Scores: (a) prequential accuracy on records 3,000..5,999 of the stationary stream; "
        "(b) accuracy over the last 1,000 records of each changed segment of the permuted "
        "stream (3,000..3,999 and 5,000..5,999), mean of the two; (c) prequential accuracy over "
        "the whole permuted stream; (d) records/s over both streams, time spent in the "
        "learner's calls only (`process_batch` in micro-batches of 256 for the operators, "
        "`predict_one` + `learn_one` per record for River and deep-river), median over seeds "
        "(min-max). Accuracies: mean ± 95% t-interval over the seeds.",
        "",
        "| arm | (a) stationary, 2nd half | (b) after changes | (c) permuted, overall | "
        "(d) records/s, median (min-max) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for arm, m in arms.items():
        lines.append(f"| {arm} | {fmt(m['a'])} | {fmt(m['b'])} | {fmt(m['c'])} | "
                     f"{m['d']['median']:,.0f} ({m['d']['min']:,.0f}-{m['d']['max']:,.0f}) |")
    for ref in (HT, CILA):
        if ref not in summ["paired"]:
            continue
        lines += ["", f"Paired differences, `{ref}` minus each arm (mean ± 95% t-interval over "
                      "seeds; bold: the interval excludes 0):", "",
                  "| other arm | (a) | (b) | (c) | speed ratio (d) |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        for arm, d in summ["paired"][ref].items():
            ratio = arms[ref]["d"]["median"] / arms[arm]["d"]["median"]
            lines.append(f"| {arm} | {fmt_diff(d['a'])} | {fmt_diff(d['b'])} | "
                         f"{fmt_diff(d['c'])} | {ratio:.2f}x |")
    per_seg = {arm: np.mean([r["arms"][arm]["permuted"]["after_changes_per_segment"]
                             for r in doc["rows"]], axis=0).tolist() for arm in arms}
    lines += ["", "(b) per changed segment, mean over seeds (records 3,000..3,999 | "
              "5,000..5,999): " + "; ".join(f"{a} {v[0]:.3f} | {v[1]:.3f}"
                                              for a, v in per_seg.items()) + "."]
    if HT in arms:
        al = [(r["arms"][HT]["stationary"]["alarm_resets"],
               r["arms"][HT]["permuted"]["alarm_resets"]) for r in doc["rows"]]
        lines.append(f"hare-tortoise alarm resets per seed (stationary, permuted): {al}.")
    if CILA in arms:
        tk = [(r["arms"][CILA]["stationary"]["tasks_opened"],
               r["arms"][CILA]["permuted"]["tasks_opened"]) for r in doc["rows"]]
        lines.append(f"cila tasks opened per seed (stationary, permuted; no `task` field, "
                     f"boundaries from new labels): {tk}.")
    load = env.get("loadavg_start"), doc.get("loadavg_end")
    lines.append("Optimiser steps: deep-river takes one Adam step per record (6,000 per stream); "
                 "the plain online MLP and hare-tortoise one step per 32 labelled records "
                 "(~190 per stream; hare-tortoise's steps also replay stored records), so the "
                 "per-record learner gets ~32x more updates from the same records, at the "
                 f"price in (d). 1-minute load average at start / end: {load[0]} / {load[1]} "
                 "(other jobs shared the 2 cores; records/s are this run's, not a quiet "
                 "machine's).")
    lines += ["", "## Which to use when", "", which_to_use(summ), "",
              "## Arms", "",
              f"* `{HT}`: `create(\"hare-tortoise\", in_dim=40, n_classes=10, seed=s)`, the "
              "defaults read at run time: `" + json.dumps(env["defaults"][HT]) + "`.",
              f"* `{CILA}`: `create(\"cila\", seed=s)`, defaults: `"
              + json.dumps(env["defaults"][CILA]) + "`; the records carry no `task` field.",
              f"* {PLAIN}: `HareTortoise(in_dim=40, n_classes=10, seed=s, **"
              + json.dumps(env["plain_params"]) + ")` (no replay, no clipping, no resets).",
              f"* {ARF}: `river.forest.ARFClassifier(seed=s)`, River's defaults (10 trees, "
              "ADWIN drift/warning detectors).",
              f"* {GNB}: `river.naive_bayes.GaussianNB()`: the cheap baseline; chosen over "
              "`OneVsRestClassifier(LogisticRegression())` because it is natively multi-class "
              "and has no learning rate or feature scaling to choose. It never forgets, so "
              "label permutations hurt it by construction."]
    if dr.get("versions"):
        lines.append(f"* {DR}: `deep_river.classification.Classifier(module=MLP 40-256-256-10, "
                     "loss_fn=\"cross_entropy\", optimizer_fn=\"adam\", lr=1e-3, seed=s)`, "
                     "`predict_one` then `learn_one` per record (one Adam step per record), run "
                     "in its own venv through `benchmarks/peers/deep_river_env.py`. Every "
                     "deep-river release pins an old torch (0.3.4: `torch>=2.5,<2.6`), so pip "
                     "refuses deep-river with this machine's torch 2.13.0 ("
                     + pip_error(dr.get("pin_conflict"))
                     + "); deep-river 0.3.4 is installed with `--no-deps` beside torch "
                     "2.13.0+cpu and its other requirements at versions inside its pins "
                     "(river 0.25.0), plus `pytest`, which it imports without declaring.")
    elif dr.get("error"):
        lines.append(f"* {DR}: **blocked**: {dr['error']}")
    else:
        lines.append(f"* {DR}: not run (`--no-deep-river`).")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--no-deep-river", action="store_true")
    ap.add_argument("--out", default=str(RESULTS / "learners_vs_peers"),
                    help="output prefix (.md and .json are appended)")
    ap.add_argument("--render", metavar="JSON",
                    help="only rewrite the markdown from the results of an earlier run")
    a = ap.parse_args()
    if a.render:
        doc = json.loads(Path(a.render).read_text())
        doc["summary"] = summary(doc["rows"])
        text = markdown(doc)
        Path(a.render).with_suffix(".md").write_text(text)
        print(text)
        return
    t0 = time.time()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    deep_river = not a.no_deep_river
    dr_info: dict[str, Any] = {}
    if deep_river:
        try:
            import deep_river_env

            deep_river_env.ensure_venv(log=log)
            dr_info["pin_conflict"] = deep_river_env.marker().get("pin_conflict")
        except Exception as e:  # noqa: BLE001 - reported as blocked
            dr_info["error"] = f"{type(e).__name__}: {e}"[-3000:]
            deep_river = False
            log(f"deep-river venv failed: {dr_info['error']}")
    rows = [run_seed(s, deep_river, log) for s in a.seeds]
    for r in rows:
        if "deep_river_versions" in r:
            dr_info["versions"] = r["deep_river_versions"]
            dr_info["params"] = r["deep_river_params"]
        if "deep_river_error" in r:
            dr_info["error"] = r["deep_river_error"]
    argv = " ".join(sys.argv[1:])
    doc = {"command": f"python benchmarks/learners_vs_peers.py {argv}".strip(),
           "environment": environment(), "deep_river": dr_info,
           "seconds": time.time() - t0, "rows": rows}
    doc["loadavg_end"] = round(os.getloadavg()[0], 2)
    doc["summary"] = summary(rows)
    Path(a.out + ".json").write_text(json.dumps(doc, indent=1))
    text = markdown(doc)
    Path(a.out + ".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
