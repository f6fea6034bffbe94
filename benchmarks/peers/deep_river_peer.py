#!/usr/bin/env python
"""deep-river peer: deep-river's online classifier, test-then-train, on streams read from stdin.

Runs INSIDE the deep-river venv (see ``deep_river_env.py``): stdlib + torch + deep-river.

Input (stdin, JSON)::

    {"seed": int, "params": {"hidden": [256, 256], "lr": 0.001, "optimizer": "adam"},
     "streams": [{"name": str, "x": [[float, ...], ...], "y": [int, ...]}]}

Output (stdout, JSON)::

    {"versions": {...}, "params": {...},
     "results": [{"name", "n", "y_pred", "wall_s", "records_per_s"}]}

``python deep_river_peer.py --versions`` prints the versions only.

Protocol. For each stream a fresh ``deep_river.classification.Classifier`` is built around an
MLP ``n_features -> hidden -> n_classes`` (ReLU; ``n_classes`` = the number of distinct labels
of the stream, all seen in its first records), ``loss_fn="cross_entropy"``, ``optimizer_fn``
``params["optimizer"]`` (default ``"adam"``), ``lr`` (default 1e-3, deep-river's default),
``seed``; torch's global generator is seeded with ``seed`` before the MLP is built (deep-river
seeds it only after, in its constructor). Records are dicts ``{feature index: value}``; each
record is predicted with ``predict_one`` and then learned with ``learn_one`` (one optimiser
step per record, the River way). ``y_pred`` is ``None`` before the first label was learned
(deep-river has no classes then). ``wall_s`` times the predict/learn loop only (the dicts
are built before it). Note deep-river's label handling: a label's output unit is its rank
among the labels observed so far, so until every label has been seen (the first few dozen
records of a shuffled 10-class stream) the ranks, and so the units, shift.
"""

from __future__ import annotations

import json
import platform
import sys
import time


def versions() -> dict:
    from importlib.metadata import version

    out = {"python": platform.python_version()}
    for name in ("deep_river", "torch", "river", "numpy", "pandas"):
        out[name] = version(name.replace("_", "-"))
    return out


def run_stream(stream: dict, seed: int, params: dict) -> dict:
    import torch
    from deep_river.classification import Classifier

    x_rows, y = stream["x"], stream["y"]
    n_features = len(x_rows[0])
    n_classes = len(set(y))
    hidden = list(params.get("hidden", [256, 256]))

    torch.manual_seed(seed)
    layers: list = []
    width = n_features
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    layers.append(torch.nn.Linear(width, n_classes))
    module = torch.nn.Sequential(*layers)
    clf = Classifier(module=module, loss_fn="cross_entropy",
                     optimizer_fn=params.get("optimizer", "adam"), lr=params.get("lr", 1e-3),
                     seed=seed)
    xs = [dict(enumerate(row)) for row in x_rows]
    preds: list = []
    seen = False
    t0 = time.perf_counter()
    for xi, yi in zip(xs, y, strict=True):
        if seen:
            p = clf.predict_one(xi)
            preds.append(p)
        else:
            preds.append(None)
        clf.learn_one(xi, yi)
        seen = True
    wall = time.perf_counter() - t0
    out = []
    for p in preds:  # labels are ints; anything else (an "unobserved" placeholder) is a miss
        try:
            out.append(None if p is None else int(p))
        except (TypeError, ValueError):
            out.append(None)
    return {"name": stream.get("name"), "n": len(y), "y_pred": out, "wall_s": wall,
            "records_per_s": len(y) / wall if wall > 0 else None}


def main() -> None:
    if "--versions" in sys.argv[1:]:
        print(json.dumps(versions()))
        return
    import torch

    torch.set_num_threads(1)
    doc = json.loads(sys.stdin.read())
    seed = int(doc.get("seed", 0))
    params = dict(doc.get("params") or {})
    results = [run_stream(s, seed, params) for s in doc["streams"]]
    print(json.dumps({"versions": versions(), "params": {
        "hidden": params.get("hidden", [256, 256]), "lr": params.get("lr", 1e-3),
        "optimizer": params.get("optimizer", "adam"), "loss_fn": "cross_entropy",
        "torch_threads": torch.get_num_threads()}, "results": results}))


if __name__ == "__main__":
    main()
