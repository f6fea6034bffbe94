"""Defaults of the ``hare-tortoise`` operator that a stream user can keep (issue 35, build 4).

One test-then-train pass over a stream, records fed to ``process_batch`` in micro-batches of
256 records, the operator's defaults against a plain online MLP (40-256-256-10 ReLU, AdamW
lr 1e-3 with torch's default weight decay 0.01, batch 32, no replay, no clipping:
``HareTortoise(method="warm", buffer_size=0, clip_norm=None, weight_decay=0.01)``).

Streams (:func:`make_stream`, used by both commands; ``seed`` picks the data and the order):

* ``mnist1d``: ``mnist1d.data.make_dataset(args)`` with ``args = get_dataset_args()``,
  ``args.num_samples = 6000`` and ``args.seed = seed`` (mnist1d's own default seed is 42);
  training and test parts are pooled (6,000 records, 40 features, 10 classes) and put in a
  random order drawn from ``seed``. So the reporting streams (seeds 0, 1, 2, ...) and the
  choosing streams (seeds >= 100) hold different generated signals.
* ``digits``: scikit-learn's 8x8 digits (1,797 records, 64 raw pixel values 0..16), 6,000
  records drawn with replacement in an order drawn from ``seed`` (choosing only).

Kinds: ``stationary``; ``labels`` (every 2,000 records the labels go through a fresh random
permutation of the 10 classes without fixed points, so every class changes its label);
``inputs`` (every 2,000 records the features go through a fresh random permutation: the same
concept seen through new inputs; choosing only, a change a head reset cannot repair).

Scores: ``stationary``: prequential accuracy of ``y_pred`` on the second half (records
3,000..5,999); ``labels``/``inputs``: accuracy over the second half of each changed segment
(records 3,000..3,999 and 5,000..5,999).

Usage::

    python benchmarks/ht_defaults.py choose --round 1 [--seeds 100 101 102]
    python benchmarks/ht_defaults.py choose --round 2 [--seeds 100 101 102]
    python benchmarks/ht_defaults.py report [--seeds 0 1 2] [--more 10]
    python benchmarks/ht_defaults.py render

``choose`` runs one round of candidate settings (``ROUNDS``) on the choosing streams (seeds
>= 100 only), writes ``results/ht_defaults_choose_r<round>.json`` and prints the margins of
every round so far and the candidate the rule (``RULE``) picks; ``report`` runs the operator's
defaults (whatever ``HareTortoise()`` is) and the plain MLP on the reporting streams (mnist1d
seeds 0, 1, 2 as in the issue, and seeds 0..MORE-1, default 10; ``--more 0`` for the issue's
seeds only) and writes ``results/ht_defaults.json`` and ``results/ht_defaults.md`` (with the
choosing tables); ``render`` rewrites the markdown from the JSON files. One pass of a 6,000
record stream takes 2-10 s on one thread; ``report`` about 12 minutes on a loaded 2-core
machine, each ``choose`` round about 10.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shiftwatch.operators.learners.hare_tortoise import HareTortoise

torch.set_num_threads(1)
RESULTS = Path(__file__).resolve().parent / "results"
N = 6000
SEGMENT = 2000
CHUNK = 256
KINDS = ("stationary", "labels", "inputs")

PLAIN = {"method": "warm", "buffer_size": 0, "clip_norm": None, "weight_decay": 0.01,
         "reset_on": None}
#: The operator's defaults before this change, spelled out (a reference arm of ``choose``).
OLD = {"ema_momentum": 0.999, "reset_every": 1000, "reset_on": None, "detector": None}
#: The candidate defaults compared by ``choose`` (overrides of the operator's parameters).
#: All but "old defaults" share: an EMA horizon of 100 steps (m = 0.99, 3,200 records), a
#: Hare reset every 2 horizons counted in labelled records (6,400), DDM on the learner's own
#: 0/1 loss driving resets (fresh optimiser, 10-step linear LR warm-up, replay emptied).
DDM = {"ema_momentum": 0.99, "reset_every": None, "reset_every_records": None,
       "reset_on": "alarm", "detector": "river:DDM", "reset_lr_warmup": 10}
ROUND1: dict[str, dict[str, Any]] = {
    "old defaults": OLD,
    "DDM, reset to Tortoise": {**DDM, "reset_to": "tortoise"},
    "DDM, reset head": {**DDM, "reset_to": "head"},
    "DDM, full reset": {**DDM, "reset_to": "full"},
    "DDM, reset head, m=0.95": {**DDM, "reset_to": "head", "ema_momentum": 0.95},
}
#: Round 2, added after round 1 showed that on mnist1d with permuted inputs DDM never fired
#: and every candidate lost 0.031 to the plain MLP: ways to follow a change no alarm marks.
HEAD = {**DDM, "reset_to": "head"}
ROUND2: dict[str, dict[str, Any]] = {
    "DDM, reset head, predict with Hare": {**HEAD, "predict_with": "hare"},
    "DDM, reset head, m=0.98": {**HEAD, "ema_momentum": 0.98},
    "ADWIN, reset head": {**HEAD, "detector": "river:ADWIN"},
    "DDM (drift_threshold 2), reset head": {**HEAD, "detector_params": {"drift_threshold": 2.0}},
    "DDM, reset head, buffer 500": {**HEAD, "buffer_size": 500},
}
ROUNDS = {1: ROUND1, 2: ROUND2}
CANDIDATES = {**ROUND1, **ROUND2}


@functools.lru_cache(maxsize=4)
def load_pool(source: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if source == "mnist1d":
        from mnist1d.data import get_dataset_args, make_dataset

        args = get_dataset_args()
        args.num_samples = N
        args.seed = seed
        d = make_dataset(args)
        x = np.concatenate([d["x"], d["x_test"]]).astype(np.float32)
        y = np.concatenate([d["y"], d["y_test"]]).astype(np.int64)
        return x, y
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.data.astype(np.float32), d.target.astype(np.int64)


def derangement(k: int, rng: np.random.Generator) -> np.ndarray:
    while True:
        p = rng.permutation(k)
        if not np.any(p == np.arange(k)):
            return p


def make_stream(source: str, kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``N`` records (x, y) of one stream; see the module docstring."""
    x, y = load_pool(source, seed)
    rng = np.random.default_rng([seed, 35])
    idx = rng.permutation(len(y)) if len(y) >= N else rng.integers(0, len(y), N)
    x, y = x[idx[:N]].copy(), y[idx[:N]].copy()
    for start in range(SEGMENT, N, SEGMENT):
        if kind == "labels":
            y[start:] = derangement(10, rng)[y[start:]]
        elif kind == "inputs":
            x[start:] = x[start:, rng.permutation(x.shape[1])]
    return x, y


def score(kind: str, hits: np.ndarray) -> float:
    if kind == "stationary":
        return float(hits[N // 2:].mean())
    half = SEGMENT // 2
    return float(np.mean([hits[s + half:s + SEGMENT].mean() for s in range(SEGMENT, N, SEGMENT)]))


def run_arm(params: dict, x: np.ndarray, y: np.ndarray, seed: int) -> tuple[np.ndarray, int]:
    op = HareTortoise(in_dim=x.shape[1], n_classes=10, seed=seed, **params)
    records = [{"value": v.tolist(), "y": int(c)} for v, c in zip(x, y, strict=True)]
    hits = []
    for i in range(0, N, CHUNK):
        hits += [o["y_pred"] == o["y"] for o in op.process_batch(records[i:i + CHUNK])]
    return np.array(hits), op.n_alarm_resets


def ci95(values: list[float]) -> tuple[float, float]:
    from scipy import stats

    a = np.asarray(values, dtype=float)
    if len(a) < 2:
        return float(a.mean()), float("nan")
    return float(a.mean()), float(stats.t.ppf(0.975, len(a) - 1) * a.std(ddof=1)
                                  / np.sqrt(len(a)))


def environment() -> dict:
    import mnist1d  # noqa: F401
    import river
    import sklearn

    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{os.cpu_count()} cores ({platform.machine()}, shared with other jobs)",
            "python": platform.python_version(), "torch": torch.__version__,
            "numpy": np.__version__, "river": river.__version__,
            "scikit-learn": sklearn.__version__, "torch_threads": 1}


def cmd_choose(a: argparse.Namespace) -> dict:
    t0 = time.time()
    rows: dict[str, dict[str, list]] = {}
    arms = {"plain MLP": PLAIN, **ROUNDS[a.round]}
    streams = [(s, k) for s in ("mnist1d", "digits") for k in KINDS]
    for source, kind in streams:
        for seed in a.seeds:
            x, y = make_stream(source, kind, seed)
            for arm, params in arms.items():
                hits, resets = run_arm(params, x, y, seed)
                r = rows.setdefault(f"{source}/{kind}", {}).setdefault(arm, [])
                r.append({"seed": seed, "score": score(kind, hits), "alarm_resets": resets})
            print(source, kind, seed, {k: round(v[-1]["score"], 3)
                                       for k, v in rows[f"{source}/{kind}"].items()},
                  f"{time.time() - t0:.0f} s", flush=True)
    out = {"command": f"python benchmarks/ht_defaults.py choose --round {a.round} --seeds "
                      + " ".join(map(str, a.seeds)),
           **environment(), "seconds": round(time.time() - t0),
           "candidates": ROUNDS[a.round], "rows": rows}
    (RESULTS / f"ht_defaults_choose_r{a.round}.json").write_text(json.dumps(out, indent=1))
    print(choose_table(merged_rounds()))
    return out


def merged_rounds() -> dict:
    """The rows of every round run so far (the plain MLP arm is the same in each)."""
    rows: dict[str, dict[str, list]] = {}
    for r in ROUNDS:
        path = RESULTS / f"ht_defaults_choose_r{r}.json"
        if not path.exists():
            continue
        for stream, arms in json.loads(path.read_text())["rows"].items():
            for arm, v in arms.items():
                if arm in rows.get(stream, {}) and rows[stream][arm] != v:
                    raise SystemExit(f"round {r}: {arm} on {stream} differs from before")
                rows.setdefault(stream, {})[arm] = v
    return {"rows": rows}


def margins(rows: dict, arm: str) -> dict[str, float]:
    """Mean over seeds of (arm - plain MLP), per stream."""
    return {s: float(np.mean([p["score"] - q["score"] for p, q in
                              zip(r[arm], r["plain MLP"], strict=True)])) for s, r in rows.items()}


RULE = ("Among the candidates whose mean margin over the plain MLP is >= -0.01 on every "
        "stationary choosing stream, take the one with the largest worst-case mean margin over "
        "the changing choosing streams (labels and inputs, mnist1d and digits); among those "
        "within 0.005 of that worst case, the one with the largest mean margin over the "
        "changing streams.")


def choose_table(out: dict) -> str:
    rows = out["rows"]
    streams = list(rows)
    lines = ["| candidate | " + " | ".join(streams) + " | worst change margin | mean change "
             "margin | eligible |", "| --- |" + " ---: |" * (len(streams) + 3)]
    scored = []
    for arm in rows[streams[0]]:
        if arm == "plain MLP":
            cells = [f"{np.mean([p['score'] for p in rows[s][arm]]):.3f}" for s in streams]
            lines.append("| plain MLP (accuracy) | " + " | ".join(cells) + " | — | — | — |")
            continue
        m = margins(rows, arm)
        worst = min(v for s, v in m.items() if not s.endswith("stationary"))
        ok = all(v >= -0.01 for s, v in m.items() if s.endswith("stationary"))
        cells = [f"{m[s]:+.3f}" for s in streams]
        mean = float(np.mean([v for s, v in m.items() if not s.endswith("stationary")]))
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {worst:+.3f} | {mean:+.3f} | "
                     f"{'yes' if ok else 'no'} |")
        mean = float(np.mean([v for s, v in m.items() if not s.endswith("stationary")]))
        if ok and arm != "old defaults":
            scored.append((worst, mean, arm))
    top = max(w for w, _, _ in scored)
    best = max((mean, arm) for w, mean, arm in scored if w >= top - 0.005)[1]
    return ("Margins over the plain MLP (mean over seeds of the paired difference); "
            "the first row gives the plain MLP's own accuracy.\n\n" + "\n".join(lines)
            + f"\n\nRule: {RULE}\n\nChosen: **{best}**")


def cmd_report(a: argparse.Namespace) -> dict:
    t0 = time.time()
    defaults = HareTortoise(in_dim=40, n_classes=10)
    shown = {k: getattr(defaults, k) for k in (
        "ema_momentum", "ema_warmup", "reset_every", "reset_every_records", "reset_on",
        "reset_to", "detector", "reset_lr_warmup", "min_reset_gap", "buffer_size",
        "clip_norm", "weight_decay", "predict_with") if hasattr(defaults, k)}
    seeds = sorted(set(a.seeds) | set(range(a.more)))
    rows: dict[str, dict[str, list]] = {}
    for kind in ("stationary", "labels"):
        for seed in seeds:
            x, y = make_stream("mnist1d", kind, seed)
            for arm, params in (("plain MLP", PLAIN), ("hare-tortoise defaults", {})):
                hits, resets = run_arm(params, x, y, seed)
                rows.setdefault(kind, {}).setdefault(arm, []).append(
                    {"seed": seed, "score": score(kind, hits), "alarm_resets": resets})
            print(kind, seed, {k: round(v[-1]["score"], 3) for k, v in rows[kind].items()},
                  f"{time.time() - t0:.0f} s", flush=True)
    cmd = "python benchmarks/ht_defaults.py report --seeds " + " ".join(map(str, a.seeds))
    if a.more:
        cmd += f" --more {a.more}"
    out = {"command": cmd, **environment(), "seconds": round(time.time() - t0),
           "defaults": shown, "rows": rows}
    (RESULTS / "ht_defaults.json").write_text(json.dumps(out, indent=1, default=str))
    (RESULTS / "ht_defaults.md").write_text(render(out, a.seeds))
    print(render(out, a.seeds))
    return out


def render(out: dict, first: list[int]) -> str:
    targets = {"stationary": -0.01, "labels": +0.02}
    names = {"stationary": "stationary: prequential accuracy, records 3,000..5,999",
             "labels": "labels permuted every 2,000: accuracy over the second half of each "
                       "changed segment"}
    lines = ["| stream | seeds | plain MLP | hare-tortoise defaults | defaults − plain (paired "
             "95% CI) | target | met | interval above | alarm resets per run |",
             "| --- | --- | ---: | ---: | ---: | ---: | :---: | :---: | ---: |"]
    all_seeds = [r["seed"] for r in out["rows"]["stationary"]["plain MLP"]]
    sets = [("issue's seeds " + ", ".join(map(str, first)), set(first))]
    if len(all_seeds) > len(first):
        sets.append((f"{len(all_seeds)} seeds {min(all_seeds)}..{max(all_seeds)}",
                     set(all_seeds)))
    for kind in ("stationary", "labels"):
        for label, chosen in sets:
            p = [r["score"] for r in out["rows"][kind]["plain MLP"] if r["seed"] in chosen]
            d = [r["score"] for r in out["rows"][kind]["hare-tortoise defaults"]
                 if r["seed"] in chosen]
            resets = [r["alarm_resets"] for r in out["rows"][kind]["hare-tortoise defaults"]
                      if r["seed"] in chosen]
            dm, dh = ci95([u - v for u, v in zip(d, p, strict=True)])
            met = "yes" if dm >= targets[kind] else "**no**"
            above = "yes" if dm - dh >= targets[kind] else "no"
            lines.append(f"| {names[kind]} | {label} | {np.mean(p):.3f} | {np.mean(d):.3f} | "
                         f"{dm:+.3f} ± {dh:.3f} | {targets[kind]:+.2f} | {met} | {above} | "
                         f"{np.mean(resets):.1f} |")
    env = ", ".join(f"{k} {v}" for k, v in out.items() if k in (
        "python", "torch", "numpy", "river", "scikit-learn"))
    return (f"# `hare-tortoise` defaults vs a plain online MLP (issue 35, build 4)\n\n"
            f"Command: `{out['command']}`\n\nDate: {out['date']}. Machine: {out['machine']}, "
            f"1 torch thread; {env}; {out['seconds']} s.\n\n"
            f"Streams: `make_stream` in `benchmarks/ht_defaults.py` (mnist1d generated with "
            f"`make_dataset(get_dataset_args())`, `num_samples=6000`, `seed` = the stream seed; "
            f"train and test pooled, random order), 6,000 records, one test-then-train pass "
            f"through `process_batch` in micro-batches of 256 records. Plain MLP: "
            f"`HareTortoise(method='warm', buffer_size=0, clip_norm=None, weight_decay=0.01, "
            f"reset_on=None)` (40-256-256-10, AdamW 1e-3, batch 32, no replay, no resets). "
            f"Targets (issue 35): defaults >= plain − 0.01 (stationary), >= plain + 0.02 "
            f"(labels), on the mean of the issue's 3 seeds (`met` compares that mean; the "
            f"interval says how sure it is). The defaults were chosen on other streams "
            f"(`choose`, see below) before this table was computed. The issue did not record "
            f"how its streams were generated; these follow its description, and the plain "
            f"MLP scores a little lower here (issue: 0.356 and 0.255).\n\nDefaults measured: "
            f"`{json.dumps(out['defaults'], default=str)}`\n\n" + "\n".join(lines) + "\n"
            + SHOWS + per_seed(out) + choose_section())


SHOWS = """
## What this shows, and what it does not

* With the chosen defaults, on a stream shorter than the periodic reset period (6,400
  labelled records), the Tortoise never feeds back into the Hare and `y_pred` comes from the
  Hare: the defaults then compute exactly what `method="warm"` with the same replay, clipping,
  weight decay and alarm resets computes (checked: identical predictions on the digits
  labels-permuted choosing stream, seed 100). So on these 6,000-record streams the margin over
  the plain MLP comes from replay (one extra batch of 32 replayed records per step, which helps
  the stationary stream) and from the detector-driven head resets with a fresh, warming-up
  optimiser and an emptied replay buffer (which help after label permutations); Hare &
  Tortoise's own mechanism (EMA + periodic reset) is not what is measured here. The Tortoise
  is still there for longer streams (`y_pred_tortoise`, and the Hare reset every 6,400
  records).
* `met` compares the mean with the target, as the issue states the targets; `interval above`
  says whether the whole paired 95% interval lies above the target (with 3 seeds the interval
  on the label-permuted stream is wide).
* A change the learner's own loss does not reveal to DDM (on the choosing streams: mnist1d
  with permuted inputs, where DDM never fired) gets no reset; there the defaults were level
  with the plain MLP (+0.006), not better.
"""


def per_seed(out: dict) -> str:
    lines = ["\n## Per seed\n", "| stream | seed | plain MLP | defaults | alarm resets |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for kind, arms in out["rows"].items():
        for p, d in zip(arms["plain MLP"], arms["hare-tortoise defaults"], strict=True):
            lines.append(f"| {kind} | {p['seed']} | {p['score']:.3f} | {d['score']:.3f} | "
                         f"{d['alarm_resets']} |")
    return "\n".join(lines) + "\n"


def choose_section() -> str:
    """How the defaults were chosen: the rounds of ``choose`` on the choosing streams."""
    merged = merged_rounds()
    if not merged["rows"]:
        return ""
    runs = []
    for r in ROUNDS:
        path = RESULTS / f"ht_defaults_choose_r{r}.json"
        if path.exists():
            d = json.loads(path.read_text())
            runs.append(f"round {r}: `{d['command']}` ({d['date']}, {d['seconds']} s)")
    cands = "\n".join(f"* {name}: `{json.dumps(p)}`" for name, p in CANDIDATES.items())
    return ("\n## How the defaults were chosen (choosing streams only)\n\n"
            "Choosing streams: `make_stream` with mnist1d generated with seeds 100, 101, 102 "
            "and scikit-learn's digits (6,000 records drawn with replacement, order seeds "
            "100..102); kinds stationary, labels permuted and inputs permuted every 2,000 "
            "records; the same scores as above (inputs: like labels). Runs: "
            + "; ".join(runs) + ". Round 1 held the first five candidates; round 2 was added "
            "after round 1 showed that DDM never fired on mnist1d with permuted inputs, where "
            "every round-1 candidate lost 0.031 to the plain MLP (and, with the tie rule as "
            "first written, 'ties go to the candidate listed first', round 1 would have picked "
            "'DDM, reset to Tortoise' on that tie alone; the tie rule was changed to the mean "
            "margin, on choosing streams only). Shared by every DDM candidate unless its name "
            "says otherwise: m = 0.99 (an EMA horizon of 100 steps = 3,200 records), a Hare "
            "reset every 2 horizons counted in records (6,400), DDM (river defaults) on the "
            "learner's own 0/1 loss, `min_reset_gap=200`, at an alarm a fresh AdamW with a "
            "10-step linear LR warm-up and the replay buffer emptied. `reset_lr_warmup=10` and "
            "the 2-horizon reset period were set by the authors' protocol, not compared.\n\n"
            f"Candidates:\n\n{cands}\n\n" + choose_table(merged) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["choose", "report", "render"])
    p.add_argument("--seeds", type=int, nargs="+", default=None)
    p.add_argument("--round", type=int, choices=sorted(ROUNDS), default=1,
                   help="choose: which round of candidates to run")
    p.add_argument("--more", type=int, default=10,
                   help="report: also seeds 0..MORE-1 (the table shows both sets)")
    a = p.parse_args(argv)
    if a.seeds is None:
        a.seeds = [100, 101, 102] if a.command == "choose" else [0, 1, 2]
    if a.command == "choose":
        if min(a.seeds) < 100:
            raise SystemExit("choose runs on seeds >= 100 (seeds < 100 are for reporting)")
        cmd_choose(a)
    elif a.command == "render":  # the markdown again from the JSON files (no runs)
        out = json.loads((RESULTS / "ht_defaults.json").read_text())
        first = [int(x) for x in out["command"].split("--seeds ")[1].split(" --")[0].split()]
        (RESULTS / "ht_defaults.md").write_text(render(out, first))
    else:
        cmd_report(a)


if __name__ == "__main__":
    main()
