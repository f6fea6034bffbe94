"""How the EMA start rule of ``hare-tortoise`` was chosen, on set-aside seeds 100..104.

Each rule is an effective momentum ``m_t`` of the ``t``-th EMA update (``m = ema_momentum``):

* ``fixed``: ``m`` (the paper; ``ema_warmup=None``);
* ``warmup10``: ``min(m, (1 + t) / (10 + t))`` (the earlier default);
* ``debias``: Adam-style bias correction, ``m (1 - m**t) / (1 - m**(t + 1))``;
* ``mean``, ``poly2``, ``poly3``: ``min(m, t / (t + k))`` with ``k = 1, 2, 3`` (``k`` is the
  operator's ``ema_warmup`` now; ``poly2`` is the default);
* ``warmup10-first-reset``: ``warmup10`` until the first reset, then ``m``.

Usage::

    python benchmarks/hare_tortoise_ema_rule.py short fixed,warmup10,mean,debias,poly2,poly3
    python benchmarks/hare_tortoise_ema_rule.py warmstart fixed,warmup10,mean,debias,poly2,poly3

``short``: ratio of each rule's second-half prequential accuracy to the plain MLP's, on the
streams of ``hare_tortoise.py short``; ``warmstart``: hare-tortoise's final test accuracy
on the protocol of ``hare_tortoise.py warmstart --width 128 --batch 128 --epochs1 100
--epochs2 50 --m 0.99 --reset-every 160``, paired to the first rule. Prints only.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from hare_tortoise import acc, ci95, digits, mnist1d, noisy, prequential, train

from shiftwatch.operators.learners.hare_tortoise import HareTortoise

SEEDS = range(100, 105)


class _Rule(HareTortoise):
    rule = "poly2"

    @property
    def ema_momentum_now(self) -> float:
        m, t, r = float(self.ema_momentum), self._ema_t, self.rule
        if r == "fixed":
            return m
        if r == "warmup10" or (r == "warmup10-first-reset" and self._n_resets == 0):
            return min(m, (1 + t) / (10 + t))
        if r == "warmup10-first-reset":
            return m
        if r == "mean":
            return min(m, t / (t + 1.0))
        if r.startswith("poly"):
            return min(m, t / (t + float(r[4:])))
        if r == "debias":
            return m * (1 - m ** t) / (1 - m ** (t + 1))
        raise ValueError(f"unknown rule {r!r}")


def rule(name: str) -> type[_Rule]:
    return type(f"Rule_{name}", (_Rule,), {"rule": name})


def short(rules: list[str]) -> None:
    m1 = mnist1d()
    pool = {"mnist1d": (np.concatenate([m1["x"], m1["x_test"]]).astype(np.float32),
                        np.concatenate([m1["y"], m1["y_test"]])), "digits": digits()}
    for name, n in [("mnist1d", 1000), ("mnist1d", 3000), ("mnist1d", 5000), ("digits", 1000),
                    ("digits", 1797)]:
        x, y = pool[name]
        res: dict[str, list[float]] = {}
        for seed in SEEDS:
            order = np.random.default_rng([seed, 21]).permutation(len(y))[:n]
            base = {"in_dim": x.shape[1], "n_classes": 10, "seed": seed}
            plain = HareTortoise(**base, method="warm", buffer_size=0, clip_norm=None,
                                 weight_decay=0.01, reset_on=None)
            p = prequential(plain, x[order], y[order])[n // 2:].mean()
            for r in rules:
                h = prequential(rule(r)(**base), x[order], y[order])[n // 2:].mean()
                res.setdefault(r, []).append(h / p)
        print(name, n, "ratio to plain:", " ".join(
            f"{k} {ci95(v)[0]:.3f}±{ci95(v)[1]:.3f}" for k, v in res.items()), flush=True)


def warmstart(rules: list[str]) -> None:
    data = mnist1d()
    res: dict[str, list[float]] = {}
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        sub = rng.choice(len(data["y"]), len(data["y"]) // 10, replace=False)
        x1, y1 = data["x"][sub], noisy(data["y"][sub], 0.5, rng)
        for r in rules:
            op = rule(r)(in_dim=40, n_classes=10, hidden=[128, 128], ema_momentum=0.99,
                         reset_every=160, lr=1e-3, seed=seed)
            train(op, x1, y1, 100, 128, np.random.default_rng([seed, 1]))
            op.task_change()
            train(op, data["x"], data["y"], 50, 128, np.random.default_rng([seed, 2]))
            res.setdefault(r, []).append(100 * acc(op, data["x_test"], data["y_test"]))
        print(seed, {k: round(v[-1], 1) for k, v in res.items()}, flush=True)
    for r in rules:
        d = [p - q for p, q in zip(res[r], res[rules[0]], strict=True)]
        (m, h), (dm, dh) = ci95(res[r]), ci95(d)
        print(f"{r} {m:.2f} ± {h:.2f}, paired to {rules[0]}: {dm:+.2f} ± {dh:.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["short", "warmstart"])
    p.add_argument("rules", help="comma-separated rule names")
    a = p.parse_args()
    t0 = time.time()
    (short if a.command == "short" else warmstart)(a.rules.split(","))
    print(f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
