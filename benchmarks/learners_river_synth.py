"""`hare-tortoise` against River's ARF and Hoeffding Adaptive Tree on River's synthetic drift
streams (issue 49, item 4), test-then-train, one pass, the same records and seeds.

    python benchmarks/learners_river_synth.py [--seeds 0 1 2 3 4] [--n 10000]

Streams (``river.datasets.synth``; from one concept to another at record ``n / 2``: abrupt,
the first ``n / 2`` records of one then ``n / 2`` of the other, and gradual,
``ConceptDriftStream(width=1000)``):

* SEA: ``variant=0`` -> ``variant=2`` (``noise=0.1``);
* Agrawal: ``classification_function=0`` -> ``4``;
* Hyperplane: ``seed=s`` -> ``seed=s + 1000`` (another hyperplane; 10 features, 5% noise);
* RandomRBFDrift: ``seed_model=s`` -> ``seed_model=s + 1000`` (new centroids; 10 features,
  2 classes);
* LEDDrift: ``n_drift_features=0`` -> ``7`` (irrelevant features on, 10% noise: the relevant
  segments move to other inputs).

Arms: ``hare-tortoise`` (the operator's defaults; ``in_dim`` and ``n_classes`` from the
stream), the plain online MLP at the same budget (``learners_vs_peers.plain_params()`` with
``batch_size=8``), River's ``forest.ARFClassifier(seed=s)`` and
``tree.HoeffdingAdaptiveTreeClassifier(seed=s)``, both at River's defaults. The networks get
the features standardised online with each feature's running mean and standard deviation of
the records *before* it (causal; what a River user gets from
``preprocessing.StandardScaler``). The trees get the raw features. deep-river is not in this
run: it is compared on mnist1d in ``learners_vs_peers.md`` and ``ht_budget_curve.md``.

Scores: accuracy over the 2,000 records after the drift point (``n/2 .. n/2 + 1999``);
prequential accuracy over the whole stream; records/s in the learner's calls only. Mean over
seeds, paired 95% t-intervals for `hare-tortoise` minus ARF. The issue's target:
`hare-tortoise` >= ARF after abrupt drifts on at least 4 of the 5 streams, at >= 5x ARF's
records/s.
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
import learners_vs_peers as L  # noqa: E402

torch.set_num_threads(1)
CHUNK = 256
AFTER = 2000


def concepts(name: str, s: int):
    from river.datasets import synth

    if name == "SEA":
        return synth.SEA(variant=0, noise=0.1, seed=s), synth.SEA(variant=2, noise=0.1,
                                                                 seed=s + 1), 2
    if name == "Agrawal":
        return (synth.Agrawal(classification_function=0, seed=s),
                synth.Agrawal(classification_function=4, seed=s + 1), 2)
    if name == "Hyperplane":
        return (synth.Hyperplane(seed=s, n_features=10), synth.Hyperplane(seed=s + 1000,
                                                                          n_features=10), 2)
    if name == "RandomRBFDrift":
        return (synth.RandomRBFDrift(seed_model=s, seed_sample=s),
                synth.RandomRBFDrift(seed_model=s + 1000, seed_sample=s + 1), 2)
    return (synth.LEDDrift(seed=s, noise_percentage=0.1, irrelevant_features=True),
            synth.LEDDrift(seed=s + 1, noise_percentage=0.1, irrelevant_features=True,
                           n_drift_features=7), 10)


def make(name: str, kind: str, s: int, n: int):
    from river.datasets import synth

    a, b, k = concepts(name, s)
    if kind == "abrupt":  # (ConceptDriftStream with width=1 overflows math.exp far from it)
        import itertools

        stream = itertools.chain(a.take(n // 2), b.take(n - n // 2))
    else:
        stream = synth.ConceptDriftStream(stream=a, drift_stream=b, position=n // 2,
                                          width=1000, seed=s).take(n)
    xs, ys = [], []
    for x, y in stream:
        xs.append(x)
        ys.append(int(y))
    return xs, np.array(ys), k


def standardised(xs: list[dict]) -> np.ndarray:
    keys = list(xs[0])
    raw = np.array([[float(x[c]) for c in keys] for x in xs])
    out = np.zeros_like(raw)
    mean = np.zeros(raw.shape[1])
    m2 = np.zeros(raw.shape[1])
    for i, r in enumerate(raw):
        sd = np.sqrt(m2 / (i - 1)) if i > 1 else np.ones(raw.shape[1])
        out[i] = (r - mean) / np.where(sd > 0, sd, 1.0)
        d = r - mean
        mean += d / (i + 1)
        m2 += d * (r - mean)
    return out.astype(np.float32)


def scores(hits: np.ndarray, n: int) -> dict:
    return {"after": float(hits[n // 2:n // 2 + AFTER].mean()), "overall": float(hits.mean())}


def run(name: str, kind: str, s: int, n: int) -> dict:
    from river import forest, tree

    from shiftwatch.operators.learners.hare_tortoise import HareTortoise

    xs, y, k = make(name, kind, s, n)
    z = standardised(xs)
    out = {}
    for arm, params in (("hare-tortoise", {}),
                        ("plain MLP (1/8)", {**L.plain_params(), "batch_size": 8})):
        op = HareTortoise(in_dim=z.shape[1], n_classes=k, seed=s, **params)
        preds, wall = L.run_operator(op, z, y)
        out[arm] = {**scores(L.hits_of(preds, y), n), "records_per_s": n / wall}
    for arm, model in (("River ARF", forest.ARFClassifier(seed=s)),
                       ("River HAT", tree.HoeffdingAdaptiveTreeClassifier(seed=s))):
        preds, wall = L.run_river_dicts(model, xs, y)
        out[arm] = {**scores(L.hits_of(preds, y), n), "records_per_s": n / wall}
    return out


def ci(d: list[float]) -> tuple[float, float]:
    from scipy import stats

    a = np.asarray(d)
    h = stats.t.ppf(0.975, len(a) - 1) * a.std(ddof=1) / np.sqrt(len(a)) if len(a) > 1 else 0
    return float(a.mean()), float(h)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--kinds", default="abrupt,gradual")
    a = ap.parse_args()
    t0 = time.time()
    names = ["SEA", "Agrawal", "Hyperplane", "RandomRBFDrift", "LEDDrift"]
    res: dict = {}
    for kind in a.kinds.split(","):
        for name in names:
            for s in a.seeds:
                r = run(name, kind, s, a.n)
                res.setdefault(kind, {}).setdefault(name, []).append(r)
                print(f"{kind:8s} {name:15s} seed {s} " + "  ".join(
                    f"{arm} {v['after']:.3f} ({v['records_per_s']:,.0f}/s)"
                    for arm, v in r.items()), flush=True)
    arms = ["hare-tortoise", "plain MLP (1/8)", "River ARF", "River HAT"]
    lines = ["# `hare-tortoise` beside River's ARF and HAT on River's drift streams (issue 49, "
             "item 4)", "",
             f"`python benchmarks/learners_river_synth.py --seeds {' '.join(map(str, a.seeds))}"
             f" --n {a.n}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{time.time() - t0:.0f} s; {platform.machine()}, 2 shared cores, one torch "
             "thread). Setup and arms: the script's docstring. Accuracy over the 2,000 "
             "records after the drift, mean over seeds; records/s median over seeds and "
             "streams of the kind.", ""]
    wins = {}
    for kind, per in res.items():
        lines += [f"## {kind} drift", "",
                  "| stream | " + " | ".join(arms) + " | HT - ARF (95%) |",
                  "| --- |" + " ---: |" * (len(arms) + 1)]
        w = 0
        for name, rows in per.items():
            cells = [f"{np.mean([r[arm]['after'] for r in rows]):.3f}" for arm in arms]
            m, h = ci([r["hare-tortoise"]["after"] - r["River ARF"]["after"] for r in rows])
            w += m >= 0
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {m:+.3f} ± {h:.3f} |")
        rps = {arm: float(np.median([r[arm]["records_per_s"] for rows in per.values()
                                     for r in rows])) for arm in arms}
        lines.append("| records/s (median) | " + " | ".join(f"{rps[x]:,.0f}" for x in arms)
                     + f" | {rps['hare-tortoise'] / rps['River ARF']:.1f}x ARF |")
        lines.append("")
        wins[kind] = (w, rps["hare-tortoise"] / rps["River ARF"])
    for kind, (w, ratio) in wins.items():
        lines.append(f"{kind}: `hare-tortoise` >= ARF (mean) on {w} of 5 streams, at "
                     f"{ratio:.1f}x ARF's records/s.")
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results" / "learners_river_synth.md").write_text(text)
    (HERE / "results" / "learners_river_synth.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
