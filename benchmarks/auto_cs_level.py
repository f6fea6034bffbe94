"""``auto``'s level detector: ``cs`` instead of River's ADWIN, on the development data.

    python benchmarks/auto_cs_level.py [--data ../shared/data] [--sets SET[,SET]] [--jobs N]

Runs ``auto`` (its defaults, ``multichannel="level"``) with its level route
(``AutoDetect._new_level``) replaced, in this process and its workers only, per candidate:

* (a) ``standardize`` -> River's ADWIN (the default, ``_new_level`` untouched),
* (b) ``standardize`` -> ``cs`` with ``cs``'s defaults,
* (c) ``cs`` alone with its defaults (a pass-through stands where ``standardize`` was, so
  ``auto``'s own two-stage level code runs unchanged).

Vectors: ``auto`` hands the level route the whole vector (``standardize`` then the detector
per channel, an alarm when any channel alarms). River's ADWIN adapter runs one ADWIN per
coordinate at the same ``delta``; ``cs`` takes the vector the same way (one detector per
coordinate, alarm when any alarms), but at ``alpha / d`` per coordinate (its own union
bound): that is ``cs``'s default behaviour and is kept.

Everything else is ``benchmarks/auto_level.py``'s (itself ``benchmarks/realdata.py``'s
harness: ``load``, the evaluating sink, ``score``): its ``run_one``, ``tables``,
``level_series`` and ``check``, with this script's candidates. The rule that uses these
numbers is declared in ``benchmarks/results/auto.md`` ("The level detector: ``cs`` instead of
ADWIN"); this script only measures.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import auto_level  # noqa: E402

#: ``level_params`` markers the patched ``_new_level`` reads (None = the default route).
CANDIDATES: list[dict | None] = [None, {"candidate": "std+cs"}, {"candidate": "cs"}]
LABELS = {None: "(a) standardize -> ADWIN", "std+cs": "(b) standardize -> cs",
          "cs": "(c) cs alone"}


def label(params: dict | None) -> str:
    return LABELS[None if params is None else params["candidate"]]


class PassThrough:
    """Stands where ``standardize`` was for candidate (c): hands each record on unchanged."""

    name = "pass"

    def process(self, record):
        return [dict(record)]

    def process_batch(self, records):
        return [dict(r) for r in records]

    def state_dict(self) -> dict:
        return {"operator": "pass", "state": {}}

    def load_state_dict(self, state) -> None:
        pass

    def warm_up(self):
        return 0


def patch() -> None:
    """Replace ``AutoDetect._new_level`` (idempotent; this process only)."""
    from shiftwatch.operators.auto import AutoDetect
    from shiftwatch.operators.registry import create

    if getattr(AutoDetect, "_cs_patched", False):
        return
    original = AutoDetect._new_level

    def _new_level(self):
        which = (self.level_params or {}).get("candidate")
        if which is None:
            return original(self)
        if which == "std+cs":
            return [create("standardize"), create("cs")]
        if which == "cs":
            return [PassThrough(), create("cs")]
        raise ValueError(f"unknown candidate {which!r}")

    AutoDetect._new_level = _new_level
    AutoDetect._cs_patched = True


def point(candidates: list, name, params=None) -> None:
    """Point ``auto_level``'s helpers and :func:`arithmetic` at a script's candidates, their
    labels (``name``) and, if given, ``auto``'s parameters for each (``params``)."""
    auto_level.CANDIDATES = candidates
    auto_level.label = name
    if params is not None:
        auto_level.auto_params = params
    globals().update(CANDIDATES=candidates, label=name)


def use_candidates() -> None:
    """Point ``auto_level``'s helpers at this script's candidates and labels."""
    point(CANDIDATES, label)


def report(results: dict, sets: list[str]) -> None:
    """Print the tables, the level-route series, the harness check and the rule's arithmetic."""
    print(auto_level.tables(results, sets))
    print(auto_level.level_series(results, sets))
    print(auto_level.check(results, sets).replace("candidate None", "candidate (a)"))
    print()
    print(arithmetic(results, sets))


def run_one(job):
    patch()
    use_candidates()
    return auto_level.run_one(job)


def arithmetic(results: dict, sets: list[str]) -> str:
    """The declared rule, written out: mean covering and mean F1@1% over the sets."""
    lines = ["| candidate | mean covering | minus the default's | mean F1@1% | "
             "passes (> +0.005 covering and F1@1% not lower)? |",
             "| --- | --- | ---: | --- | --- |"]
    per = {ci: {ds: auto_level.means(results[ci][ds]) for ds in sets} for ci in results}
    cov = {ci: float(np.mean([per[ci][ds]["covering"] for ds in sets])) for ci in results}
    f1 = {ci: float(np.mean([per[ci][ds]["F1@1%"] for ds in sets])) for ci in results}
    passing = []
    for ci, p in enumerate(CANDIDATES):
        c_txt = "(" + " + ".join(f"{per[ci][ds]['covering']:.4f}" for ds in sets) \
            + f") / {len(sets)} = {cov[ci]:.4f}"
        f_txt = "(" + " + ".join(f"{per[ci][ds]['F1@1%']:.4f}" for ds in sets) \
            + f") / {len(sets)} = {f1[ci]:.4f}"
        if ci == 0:
            lines.append(f"| {label(p)} (default) | {c_txt} | - | {f_txt} | - |")
            continue
        d = cov[ci] - cov[0]
        ok = d > 0.005 and f1[ci] >= f1[0]
        why = [] if ok else (["covering not > +0.005"] if d <= 0.005 else []) + (
            ["F1@1% lower"] if f1[ci] < f1[0] else [])
        if ok:
            passing.append(ci)
        lines.append(f"| {label(p)} | {c_txt} | {d:+.4f} | {f_txt} | "
                     + ("yes" if ok else "no (" + "; ".join(why) + ")") + " |")
    if passing:
        best = max(passing, key=lambda ci: cov[ci])
        verdict = (f"Decision by the declared rule: {label(CANDIDATES[best])} would replace "
                   "the default (reported only; not applied to the library).")
    else:
        verdict = "Decision by the declared rule: the default (a) stays."
    return "\n".join(lines + ["", verdict, ""])


def main(argv=None) -> int:
    patch()
    use_candidates()
    got = auto_level.run(argv, "benchmarks/auto_cs_level.py", run_one)
    if got == 2:
        return 2
    report(*got)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
