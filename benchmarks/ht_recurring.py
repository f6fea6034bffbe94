"""Where the Tortoise earns its place (issue 49, item 2): recurring concepts on streams long
enough for many resets; the Tortoise (``y_pred_tortoise``) against the Hare (``y_pred``, the
operator's default prediction) and the plain online MLP at the same budget.

    python benchmarks/ht_recurring.py choose [--seeds 100 101 102]
    python benchmarks/ht_recurring.py report [--seeds 0 1 2 3 4 5 6 7 8 9]

Streams: 20,000 records drawn with replacement from the pool of ``ht_defaults.load_pool``
(mnist1d's 6,000 generated series of the seed; for choosing also scikit-learn's 1,797
digits), in segments of 2,000 records. ``recurring``: the labels pass through mapping A (the
identity) and mapping B (a permutation without fixed points, ``ht_defaults.derangement``) in
turn, A B A B ..., so every concept from the third segment on has been seen before.
``stationary``: mapping A throughout. With the defaults the periodic reset comes every 1,600
labelled records (``reset_period_records``), so a stream is 12.5x the cadence; a DDM alarm
reset also restarts the period's count, so on the recurring streams most resets are DDM's at
the mapping switches (the counts of both are in the results).

Scores: (r) accuracy over the first 200 records of each recurring segment (segments 3-10:
how fast a concept seen before comes back); (s) accuracy over the second half of every
segment of the recurring stream; (t) accuracy over the second half of the stationary
stream. Arms: the operator's defaults read twice from one run, its Hare (``y_pred``) and its
Tortoise (``y_pred_tortoise``), and the plain online MLP (``learners_vs_peers.plain_params()``
with ``batch_size=8``, the operator's budget).

Rule (written before any run of this script): on the choosing seeds (100-102, both
sources), the operator's ``predict_with`` default changes from the Hare to the Tortoise only
if the Tortoise's mean of (r) and (s) exceeds the Hare's by more than 0.005 and its (t) is
not below the Hare's by more than 0.01; otherwise the Hare stays. The report runs mnist1d
seeds 0-9 with paired 95% t-intervals (Tortoise - Hare, Hare - plain, Tortoise - plain).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import ht_defaults as D  # noqa: E402
import learners_vs_peers as L  # noqa: E402

torch.set_num_threads(1)
N, SEG, EARLY = 20_000, 2_000, 200
ARMS = ("Hare (y_pred)", "Tortoise (y_pred_tortoise)", "plain MLP (1/8)")


def stream(source: str, kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    x, y = D.load_pool(source, seed)
    rng = np.random.default_rng([seed, 492])
    idx = rng.integers(0, len(y), N)
    x, y = x[idx].astype(np.float32), y[idx].copy()
    if kind == "recurring":
        b = D.derangement(10, rng)
        for s in range(SEG, N, 2 * SEG):
            y[s:s + SEG] = b[y[s:s + SEG]]
    return x, y


def feed(op, x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    records = [{"value": v.tolist(), "y": int(c)} for v, c in zip(x, y, strict=True)]
    got: dict[str, list] = {"y_pred": [], "y_pred_tortoise": []}
    for i in range(0, N, 256):
        for o in op.process_batch(records[i:i + 256]):
            for f in got:
                got[f].append(o.get(f))
    return {f: L.hits_of(v, y) for f, v in got.items() if any(p is not None for p in v)}


def scores(kind: str, hits: np.ndarray) -> dict:
    if kind == "stationary":
        return {"t": float(hits[N // 2:].mean())}
    return {"r": float(np.mean([hits[s:s + EARLY].mean() for s in range(2 * SEG, N, SEG)])),
            "s": float(np.mean([hits[s + SEG // 2:s + SEG].mean() for s in range(0, N, SEG)]))}


def run(source: str, seed: int) -> dict:
    from shiftwatch.operators import create
    from shiftwatch.operators.learners.hare_tortoise import HareTortoise

    out: dict = {a: {} for a in ARMS}
    counts = {}
    for kind in ("recurring", "stationary"):
        x, y = stream(source, kind, seed)
        op = create("hare-tortoise", in_dim=x.shape[1], n_classes=10, seed=seed)
        h = feed(op, x, y)
        out[ARMS[0]].update(scores(kind, h["y_pred"]))
        out[ARMS[1]].update(scores(kind, h["y_pred_tortoise"]))
        counts[kind] = {"resets": op.n_resets, "alarm_resets": op.n_alarm_resets,
                        "period_records": op.reset_period_records}
        plain = HareTortoise(in_dim=x.shape[1], n_classes=10, seed=seed,
                             **{**L.plain_params(), "batch_size": 8})
        out[ARMS[2]].update(scores(kind, feed(plain, x, y)["y_pred"]))
    return {"scores": out, "counts": counts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["choose", "report"])
    ap.add_argument("--seeds", type=int, nargs="+")
    a = ap.parse_args()
    seeds = a.seeds or ([100, 101, 102] if a.mode == "choose" else list(range(10)))
    sources = ["mnist1d", "digits"] if a.mode == "choose" else ["mnist1d"]
    t0 = time.time()
    rows = []
    for src in sources:
        for s in seeds:
            r = run(src, s)
            rows.append({"source": src, "seed": s, **r})
            print(src, s, json.dumps(r["scores"]), json.dumps(r["counts"]), flush=True)
    cmd = f"python benchmarks/ht_recurring.py {a.mode} --seeds {' '.join(map(str, seeds))}"
    lines = [f"## {a.mode} ({', '.join(sources)}; seeds {seeds})", "",
             f"`{cmd}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{time.time() - t0:.0f} s, 2 shared cores, one torch thread)", "",
             "| arm | (r) recurring, first 200 | (s) recurring, 2nd halves | "
             "(t) stationary, 2nd half |", "| --- | ---: | ---: | ---: |"]
    for arm in ARMS:
        lines.append(f"| {arm} | " + " | ".join(
            f"{np.mean([r['scores'][arm][k] for r in rows]):.3f}" for k in "rst") + " |")
    lines += ["", "Paired differences (mean ± 95% t-interval over all rows):", "",
              "| difference | (r) | (s) | (t) |", "| --- | ---: | ---: | ---: |"]
    for p, q in ((1, 0), (0, 2), (1, 2)):
        cells = []
        for k in "rst":
            m, h = D.ci95([r["scores"][ARMS[p]][k] - r["scores"][ARMS[q]][k] for r in rows])
            cells.append(f"{m:+.3f} ± {h:.3f}")
        lines.append(f"| {ARMS[p]} - {ARMS[q]} | " + " | ".join(cells) + " |")
    res = [r["counts"]["recurring"]["resets"] for r in rows]
    al = [r["counts"]["recurring"]["alarm_resets"] for r in rows]
    lines += ["", f"Resets on the recurring streams: {min(res)}-{max(res)} in all "
              f"(of which DDM's: {min(al)}-{max(al)}); periodic cadence "
              f"{rows[0]['counts']['recurring']['period_records']} records."]
    if a.mode == "choose":
        th = np.mean([(r["scores"][ARMS[1]]["r"] + r["scores"][ARMS[1]]["s"]) / 2
                      - (r["scores"][ARMS[0]]["r"] + r["scores"][ARMS[0]]["s"]) / 2
                      for r in rows])
        tt = np.mean([r["scores"][ARMS[1]]["t"] - r["scores"][ARMS[0]]["t"] for r in rows])
        switch = th > 0.005 and tt >= -0.01
        lines += ["", f"Rule: Tortoise - Hare on the mean of (r) and (s) {th:+.4f} (needs > "
                  f"+0.005), on (t) {tt:+.4f} (needs >= -0.01): **"
                  + ("switch `predict_with` to the Tortoise" if switch else
                     "the Hare stays the default prediction") + "**."]
    text = "\n".join(lines) + "\n"
    print(text)
    out = HERE / "results" / "ht_recurring.md"
    prev = out.read_text() if out.exists() else ("# Tortoise vs Hare vs plain on recurring "
                                                 "concepts (issue 49, item 2)\n\n")
    head = prev.split(f"## {a.mode} (")[0].rstrip() + "\n\n"
    tail = ""
    if f"## {a.mode} (" in prev:
        after = prev.split(f"## {a.mode} (", 1)[1]
        tail = ("\n## " + after.split("\n## ", 1)[1]) if "\n## " in after else ""
    out.write_text(head + text + tail)
    (HERE / "results" / f"ht_recurring_{a.mode}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
