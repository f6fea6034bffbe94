"""The learners on River's bundled real sets and scikit-learn's digits, River's and
deep-river's learners beside them in one run (issue 49, item 4).

    python benchmarks/learners_real.py [--seeds 0 1 2 3 4] [--no-deep-river]

Streams (test-then-train, one pass):

* ``Phishing`` (``river.datasets.Phishing``: 1,250 web pages, 9 features, 2 classes) and
  ``ImageSegments`` (``river.datasets.ImageSegments``: 2,310 image regions, 18 features, 7
  classes), in River's order, the order a River user's ``progressive_val_score`` sees; the
  seed changes only the learners' randomness;
* ``digits``: scikit-learn's 1,797 8x8 digits (64 features, 10 classes) in an order drawn
  from ``default_rng([seed, 49])``;
* ``digits, labels permuted``: the same records; from record 899 on, labels pass through a
  random permutation of the 10 classes without fixed points (``learners_vs_peers.derangement``).

Scores: prequential accuracy over the whole stream; on the permuted stream also the accuracy
over records 1,348..1,796 (the second half of the segment after the change). records/s:
records / seconds in the learner's calls (median over seeds).

Arms: ``hare-tortoise`` and ``cila`` at their defaults (``cila`` without task ids), the plain
online MLP at ``hare-tortoise``'s budget (``learners_vs_peers.plain_params()`` with
``batch_size=8``), River's ``forest.ARFClassifier(seed=s)`` and
``tree.HoeffdingAdaptiveTreeClassifier(seed=s)`` at River's defaults, and deep-river's MLP (one
Adam step per record, ``benchmarks/peers/deep_river_env.py``, its own venv). The networks get
each feature standardised by the running mean and standard deviation of the records before it
(``learners_river_synth.standardised``; causal, what ``preprocessing.StandardScaler`` gives a
River user); the trees get the raw features, as River users feed them. No parameter of any arm
was chosen on these streams. Paired 95% t-intervals over seeds for ``hare-tortoise`` minus
each other arm.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "peers"))
import learners_river_synth as S  # noqa: E402
import learners_vs_peers as L  # noqa: E402

torch.set_num_threads(1)
HT, PLAIN, CILA, ARF, HAT, DR = ("hare-tortoise", "plain MLP (1/8)", "cila", "River ARF",
                                 "River HAT", "deep-river MLP")
ARMS = (HT, PLAIN, CILA, ARF, HAT, DR)


def river_set(name: str) -> tuple[list[dict], np.ndarray]:
    from river import datasets

    rows = list(getattr(datasets, name)())
    xs = [dict(x) for x, _ in rows]
    labels = [y for _, y in rows]
    classes = sorted(set(labels), key=str)
    y = np.array([classes.index(v) for v in labels], dtype=np.int64)
    return xs, y


def make_streams(seed: int) -> dict[str, dict]:
    from sklearn.datasets import load_digits

    out = {}
    for name in ("Phishing", "ImageSegments"):
        xs, y = river_set(name)
        out[name] = {"xs": xs, "y": y, "change": None}
    d = load_digits()
    order = np.random.default_rng([seed, 49]).permutation(len(d.target))
    x, y = d.data[order], d.target[order].astype(np.int64)
    xs = [dict(enumerate(map(float, r))) for r in x]
    out["digits"] = {"xs": xs, "y": y, "change": None}
    cut = len(y) // 2
    yp = y.copy()
    yp[cut:] = L.derangement(10, np.random.default_rng([seed, 4949]))[yp[cut:]]
    out["digits, labels permuted"] = {"xs": xs, "y": yp, "change": cut}
    return out


def score(hits: np.ndarray, change: int | None) -> dict:
    out = {"prequential": float(hits.mean())}
    if change is not None:
        half = change + (len(hits) - change) // 2
        out["after_change"] = float(hits[half:].mean())
    return out


def run_seed(seed: int, deep_river: bool) -> dict:
    from river import forest, tree

    from shiftwatch.operators import create
    from shiftwatch.operators.learners.hare_tortoise import HareTortoise

    res: dict = {}
    streams = make_streams(seed)
    for name, s in streams.items():
        xs, y = s["xs"], s["y"]
        z = s["z"] = S.standardised(xs)
        k = 10 if name.startswith("digits") else int(y.max()) + 1
        r: dict = {}
        for arm in (HT, PLAIN, CILA):
            if arm == HT:
                op = create(HT, in_dim=z.shape[1], n_classes=k, seed=seed)
            elif arm == PLAIN:
                op = HareTortoise(in_dim=z.shape[1], n_classes=k, seed=seed,
                                  **{**L.plain_params(), "batch_size": 8})
            else:
                op = create(CILA, seed=seed)
            preds, wall = L.run_operator(op, z, y)
            r[arm] = {**score(L.hits_of(preds, y), s["change"]), "records_per_s": len(y) / wall}
        for arm, model in ((ARF, forest.ARFClassifier(seed=seed)),
                           (HAT, tree.HoeffdingAdaptiveTreeClassifier(seed=seed))):
            preds, wall = L.run_river_dicts(model, xs, y)
            r[arm] = {**score(L.hits_of(preds, y), s["change"]), "records_per_s": len(y) / wall}
        res[name] = r
    if deep_river:
        from deep_river_env import run_deep_river

        doc = run_deep_river([{"name": n, "x": s["z"].tolist(),
                               "y": s["y"].tolist()} for n, s in streams.items()], seed)
        for d in doc["results"]:
            s = streams[d["name"]]
            res[d["name"]][DR] = {**score(L.hits_of(d["y_pred"], s["y"]), s["change"]),
                                  "records_per_s": d["records_per_s"]}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--no-deep-river", action="store_true")
    a = ap.parse_args()
    t0 = time.time()
    rows = []
    for s in a.seeds:
        r = run_seed(s, not a.no_deep_river)
        rows.append(r)
        for name, per in r.items():
            print(f"seed {s} {name:24s} " + "  ".join(
                f"{arm} {v['prequential']:.3f}" for arm, v in per.items()), flush=True)
    arms = [x for x in ARMS if all(x in r[n] for r in rows for n in r)]
    cmd = "python benchmarks/learners_real.py --seeds " + " ".join(map(str, a.seeds)) + (
        " --no-deep-river" if a.no_deep_river else "")
    lines = ["# The learners on River's real sets and scikit-learn's digits, beside River and "
             "deep-river (issue 49, item 4)", "",
             f"`{cmd}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{time.time() - t0:.0f} s; {platform.machine()}, 2 shared cores, one torch "
             "thread). Streams, arms and scores: the script's docstring. Mean over "
             f"{len(a.seeds)} seeds; records/s: median over seeds and streams.", "",
             "| stream, score | " + " | ".join(arms) + " |", "| --- |" + " ---: |" * len(arms)]
    names = list(rows[0])
    metrics = [(n, "prequential") for n in names] + [
        (n, "after_change") for n in names if "after_change" in rows[0][n][HT]]
    for n, m in metrics:
        lines.append(f"| {n}, {m.replace('_', ' ')} | " + " | ".join(
            f"{np.mean([r[n][x][m] for r in rows]):.3f}" for x in arms) + " |")
    rps = {x: float(np.median([r[n][x]["records_per_s"] for r in rows for n in names]))
           for x in arms}
    lines.append("| records/s (median) | " + " | ".join(f"{rps[x]:,.0f}" for x in arms) + " |")
    lines += ["", f"`{HT}` minus each arm, paired over seeds (95% t-interval; bold: the "
              "interval excludes 0):", "",
              "| stream, score | " + " | ".join(x for x in arms if x != HT) + " |",
              "| --- |" + " ---: |" * (len(arms) - 1)]
    for n, m in metrics:
        cells = []
        for x in arms:
            if x == HT:
                continue
            mean, half = S.ci([r[n][HT][m] - r[n][x][m] for r in rows])
            c = f"{mean:+.3f} ± {half:.3f}"
            cells.append(f"**{c}**" if abs(mean) > half and len(rows) > 1 else c)
        lines.append(f"| {n}, {m.replace('_', ' ')} | " + " | ".join(cells) + " |")
    lines += ["", "records/s ratio of `hare-tortoise` to each arm: " + ", ".join(
        f"{x} {rps[HT] / rps[x]:.1f}x" for x in arms if x != HT) + "."]
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results" / "learners_real.md").write_text(text)
    (HERE / "results" / "learners_real.json").write_text(json.dumps(
        {"cmd": cmd, "seeds": a.seeds, "rows": rows, "records_per_s": rps}, indent=1))


if __name__ == "__main__":
    main()
