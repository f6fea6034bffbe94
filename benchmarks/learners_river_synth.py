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
stream), ``cila`` at its defaults without task ids, the plain online MLP at the same budget
(``learners_vs_peers.plain_params()`` with ``batch_size=8``), River's
``forest.ARFClassifier(seed=s)`` and ``tree.HoeffdingAdaptiveTreeClassifier(seed=s)``, both at
River's defaults, and deep-river's MLP (one Adam step per record,
``benchmarks/peers/deep_river_env.py``, its own venv; ``--no-deep-river`` leaves it out). The
networks get the features standardised online with each feature's running mean and standard
deviation of the records *before* it (causal; what a River user gets from
``preprocessing.StandardScaler``). The trees get the raw features.

Scores: accuracy over the 2,000 records after the drift point (``n/2 .. n/2 + 1999``);
prequential accuracy over the whole stream; records/s in the learner's calls only
(deep-river's as its peer script measures it, the model's calls only). Mean over seeds,
paired 95% t-intervals for `hare-tortoise` minus ARF and minus deep-river. The issue's target:
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
sys.path.insert(0, str(HERE / "peers"))
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


HT, CILA, PLAIN, ARF, HAT, DR = ("hare-tortoise", "cila", "plain MLP (1/8)", "River ARF",
                                 "River HAT", "deep-river MLP")


def run(name: str, kind: str, s: int, n: int) -> tuple[dict, np.ndarray, np.ndarray]:
    """Every arm but deep-river on one stream; also its standardised features and labels."""
    from river import forest, tree

    from shiftwatch.operators import create
    from shiftwatch.operators.learners.hare_tortoise import HareTortoise

    xs, y, k = make(name, kind, s, n)
    z = standardised(xs)
    out = {}
    for arm in (HT, CILA, PLAIN):
        if arm == CILA:
            op = create(CILA, seed=s)
        else:
            op = HareTortoise(in_dim=z.shape[1], n_classes=k, seed=s,
                              **({} if arm == HT else {**L.plain_params(), "batch_size": 8}))
        preds, wall = L.run_operator(op, z, y)
        out[arm] = {**scores(L.hits_of(preds, y), n), "records_per_s": n / wall}
    for arm, model in (("River ARF", forest.ARFClassifier(seed=s)),
                       ("River HAT", tree.HoeffdingAdaptiveTreeClassifier(seed=s))):
        preds, wall = L.run_river_dicts(model, xs, y)
        out[arm] = {**scores(L.hits_of(preds, y), n), "records_per_s": n / wall}
    return out, z, y


def run_seed(s: int, n: int, kinds: list[str], names: list[str], deep_river: bool) -> dict:
    """{kind: {stream: arms}} of one seed; deep-river in one call over all its streams."""
    res: dict = {}
    data = {}
    for kind in kinds:
        for name in names:
            r, z, y = run(name, kind, s, n)
            res.setdefault(kind, {})[name] = r
            data[f"{kind}/{name}"] = (z, y)
    if deep_river:
        from deep_river_env import run_deep_river

        doc = run_deep_river([{"name": key, "x": z.tolist(), "y": y.tolist()}
                              for key, (z, y) in data.items()], s)
        for d in doc["results"]:
            kind, name = d["name"].split("/")
            y = data[d["name"]][1]
            res[kind][name][DR] = {**scores(L.hits_of(d["y_pred"], y), n),
                                   "records_per_s": d["records_per_s"]}
    for kind in kinds:
        for name in names:
            print(f"{kind:8s} {name:15s} seed {s} " + "  ".join(
                f"{arm} {v['after']:.3f} ({v['records_per_s']:,.0f}/s)"
                for arm, v in res[kind][name].items()), flush=True)
    return res


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
    ap.add_argument("--no-deep-river", action="store_true")
    a = ap.parse_args()
    t0 = time.time()
    names = ["SEA", "Agrawal", "Hyperplane", "RandomRBFDrift", "LEDDrift"]
    kinds = a.kinds.split(",")
    res: dict = {}
    for s in a.seeds:
        per_seed = run_seed(s, a.n, kinds, names, not a.no_deep_river)
        for kind in kinds:
            for name in names:
                res.setdefault(kind, {}).setdefault(name, []).append(per_seed[kind][name])
    arms = [HT, CILA, PLAIN, ARF, HAT] + ([] if a.no_deep_river else [DR])
    lines = ["# `hare-tortoise` beside River's ARF and HAT and deep-river on River's drift "
             "streams (issue 49, item 4)", "",
             f"`python benchmarks/learners_river_synth.py --seeds {' '.join(map(str, a.seeds))}"
             f" --n {a.n}{' --no-deep-river' if a.no_deep_river else ''}` "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{time.time() - t0:.0f} s; {platform.machine()}, 2 shared cores, one torch "
             "thread). Setup and arms: the script's docstring. Accuracy over the 2,000 "
             "records after the drift, mean over seeds; records/s median over seeds and "
             "streams of the kind.", ""]
    wins = {}
    for kind, per in res.items():
        lines += [f"## {kind} drift", "",
                  "| stream | " + " | ".join(arms) + " | HT - ARF (95%) |"
                  + (" HT - deep-river (95%) |" if DR in arms else ""),
                  "| --- |" + " ---: |" * (len(arms) + 1 + (DR in arms))]
        w = 0
        for name, rows in per.items():
            cells = [f"{np.mean([r[arm]['after'] for r in rows]):.3f}" for arm in arms]
            m, h = ci([r[HT]["after"] - r[ARF]["after"] for r in rows])
            w += m >= 0
            extra = ""
            if DR in arms:
                md, hd = ci([r[HT]["after"] - r[DR]["after"] for r in rows])
                extra = f" {md:+.3f} ± {hd:.3f} |"
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {m:+.3f} ± {h:.3f} |" + extra)
        rps = {arm: float(np.median([r[arm]["records_per_s"] for rows in per.values()
                                     for r in rows])) for arm in arms}
        lines.append("| records/s (median) | " + " | ".join(f"{rps[x]:,.0f}" for x in arms)
                     + f" | {rps[HT] / rps[ARF]:.1f}x ARF |"
                     + (f" {rps[HT] / rps[DR]:.1f}x deep-river |" if DR in arms else ""))
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
