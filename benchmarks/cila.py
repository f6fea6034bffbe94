"""CILA against Co2L, experience replay, fine-tuning and joint training, through the operator.

Streams: Split-Digits (scikit-learn digits, 5 tasks x 2 classes), Split-mnist1d (5 x 2) and a
domain-incremental Permuted-Digits (5 tasks, all 10 classes, a fixed feature permutation per
task). Each task's training samples arrive once, shuffled, as records with ``task``; the
operator trains test-then-train on mini-batches. After each task ``end_task()`` closes it
(buffer merge, probe refit) and the test sets of the tasks seen so far are scored with
``decision_scores``: class-incremental = argmax over all seen classes, task-incremental =
argmax over the task's two classes (same training run). Final accuracy = mean of the last
row of the accuracy matrix, forgetting = :func:`shiftwatch.sinks.metrics.forgetting`.

Run: ``python benchmarks/cila.py`` (4-10 minutes on one thread of a shared 2-core
machine; ``--quick`` for a smoke run). Writes ``benchmarks/results/cila.md`` and two PNGs
next to it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import time
from pathlib import Path

import numpy as np
import torch

from shiftwatch.operators.learners.cila import CILA
from shiftwatch.sinks.metrics import forgetting

RESULTS = Path(__file__).resolve().parent / "results"

COMMON = {"batch_size": 32, "hidden_sizes": [128], "embedding_dim": 64, "projection_dim": 32,
          "lr": 1e-3, "probe_epochs": 200, "augment_strength": 0.1}


# ---- data ----------------------------------------------------------------------------------


def _split(x, y, test_frac, seed):
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        k = int(round(test_frac * len(idx)))
        test.extend(idx[:k])
        train.extend(idx[k:])
    return (x[train], y[train]), (x[test], y[test])


def load_digits_data(seed):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    return _split(x, d.target.astype(np.int64), 0.3, seed)


_MNIST1D = None


def load_mnist1d_data(seed):
    global _MNIST1D
    if _MNIST1D is None:
        from mnist1d.data import get_dataset_args, make_dataset

        _MNIST1D = make_dataset(get_dataset_args())  # offline, fixed seed of the package
    d = _MNIST1D
    mu, sd = d["x"].mean(0), d["x"].std(0) + 1e-6
    return (((d["x"] - mu) / sd).astype(np.float32), d["y"].astype(np.int64)), (
        ((d["x_test"] - mu) / sd).astype(np.float32), d["y_test"].astype(np.int64))


def split_tasks(data, n_tasks=5):
    """Class-incremental: task t holds classes 2t and 2t+1."""
    (xtr, ytr), (xte, yte) = data
    tasks = []
    for t in range(n_tasks):
        cls = [2 * t, 2 * t + 1]
        tr, te = np.isin(ytr, cls), np.isin(yte, cls)
        tasks.append({"classes": cls, "train": (xtr[tr], ytr[tr]), "test": (xte[te], yte[te])})
    return tasks


def permuted_tasks(data, seed, n_tasks=5):
    """Domain-incremental: every task has all classes, features permuted (task 0: identity)."""
    (xtr, ytr), (xte, yte) = data
    rng = np.random.default_rng(1000 + seed)
    tasks = []
    for t in range(n_tasks):
        perm = np.arange(xtr.shape[1]) if t == 0 else rng.permutation(xtr.shape[1])
        # Each task gets its own fifth of the training set, so the stream never repeats a sample.
        part = np.arange(len(ytr)) % n_tasks == t
        tasks.append({"classes": list(range(10)), "train": (xtr[part][:, perm], ytr[part]),
                      "test": (xte[:, perm], yte)})
    return tasks


# ---- one run -------------------------------------------------------------------------------


def _records(x, y, task, rng):
    order = rng.permutation(len(y))
    return [{"key": "k", "task": task, "y": int(y[i]), "value": x[i].tolist()} for i in order]


def _accuracy(op, x, y, classes=None):
    scores = op.decision_scores(x)
    labels = np.array(op.classes_)
    if classes is not None:
        keep = np.isin(labels, classes)
        scores, labels = scores[:, keep], labels[keep]
    return float(np.mean(labels[scores.argmax(1)] == y))


def run_stream(tasks, method, buffer_size, seed, steps, kappa, lambda_form="max"):
    """Train through the tasks; return the class-IL and task-IL accuracy matrices and more."""
    rng = np.random.default_rng(seed)
    op = CILA(method=method, buffer_size=buffer_size, steps=steps, kappa=kappa,
              lambda_form=lambda_form, seed=seed, **COMMON)
    T = len(tasks)
    R_cil, R_til = np.full((T, T), np.nan), np.full((T, T), np.nan)
    hits = n = 0
    t0 = time.perf_counter()
    for t, task in enumerate(tasks):
        recs = _records(*task["train"], t, rng)
        for r, o in zip(recs, op.process_batch(recs), strict=True):
            hits += o["y_pred"] == r["y"]
            n += 1
        op.end_task()
        for j in range(t + 1):
            x, y = tasks[j]["test"]
            R_cil[t, j] = _accuracy(op, x, y)
            R_til[t, j] = _accuracy(op, x, y, tasks[j]["classes"])
    return {"R_cil": R_cil, "R_til": R_til, "lambdas": op.lambdas, "prequential": hits / n,
            "seconds": time.perf_counter() - t0, "records": n, "task_losses": op.task_losses}


def run_joint(tasks, seed, steps):
    """Upper bound: one task holding every task's training data, shuffled."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([t["train"][0] for t in tasks])
    y = np.concatenate([t["train"][1] for t in tasks])
    op = CILA(method="finetune", buffer_size=0, steps=steps, seed=seed, **COMMON)
    op.process_batch(_records(x, y, 0, rng))
    op.end_task()
    cil = [_accuracy(op, *t["test"]) for t in tasks]
    til = [_accuracy(op, *t["test"], t["classes"]) for t in tasks]
    return {"acc_cil": float(np.mean(cil)), "acc_til": float(np.mean(til))}


# ---- statistics and report -------------------------------------------------------------------


def mean_ci(xs):
    from scipy import stats

    xs = np.asarray(xs, dtype=float)
    if len(xs) < 2:
        return float(xs.mean()), float("nan")
    half = stats.t.ppf(0.975, len(xs) - 1) * xs.std(ddof=1) / np.sqrt(len(xs))
    return float(xs.mean()), float(half)


def fmt(xs, scale=100.0):
    m, h = mean_ci(np.asarray(xs) * scale)
    return f"{m:.1f} ± {h:.1f}"


def _check_peers(cila, er, batch_size):
    """The ER step is a fair peer: the same encoder (architecture and size), one gradient step
    each, and as many replayed samples (a buffer holding at least that many)."""
    def arch(op):
        return [(type(m).__name__, tuple(p.shape)) for m in op._encoder.modules()
                for p in m.parameters(recurse=False)]

    assert arch(cila) == arch(er), (arch(cila), arch(er))
    assert cila.steps == er.steps == 1
    for op in (cila, er):
        rb = op.batch_size if op.replay_batch_size is None else op.replay_batch_size
        assert op.batch_size == rb == batch_size and len(op._buffer) >= rb, op.method
        assert op._replays


def speed(steps_reps=200, batch_size=32):
    """One training step (batch + as many replayed) of CILA vs ER, same encoder, same run."""
    tasks = split_tasks(load_digits_data(0))
    ops = {}
    for method in ("cila", "er"):
        op = CILA(method=method, buffer_size=200, seed=0, **{**COMMON, "batch_size": batch_size})
        rng = np.random.default_rng(0)
        for t in range(2):  # a second task: frozen model and buffer in place
            op.process_batch(_records(*tasks[t]["train"], t, rng))
        ops[method] = op
    _check_peers(ops["cila"], ops["er"], batch_size)
    x = torch.from_numpy(tasks[1]["train"][0][:batch_size].copy())
    yk = torch.tensor([ops["cila"].classes_.index(int(v))
                       for v in tasks[1]["train"][1][:batch_size]])
    times = {m: [] for m in ops}
    cpu = {m: [] for m in ops}
    for _ in range(steps_reps):
        for m, op in ops.items():
            with op._torch_threads():  # the settings process() runs under
                c0, t0 = time.thread_time(), time.perf_counter()
                op._train_step(x, yk)
                times[m].append(time.perf_counter() - t0)
                cpu[m].append(time.thread_time() - c0)
    # Wall-clock medians (the figure of record) and, less sensitive to other jobs preempting
    # this one on a shared machine, medians of the thread's CPU time ("<method>_cpu").
    step = {m: float(np.median(v)) for m, v in times.items()}
    step.update({f"{m}_cpu": float(np.median(v)) for m, v in cpu.items()})
    # Records/s of the operator: test-then-train over a fresh task-2 stream (batches of 32,
    # one step each), and predict-only records.
    rate = {}
    for m, op in ops.items():
        recs = _records(*tasks[2]["train"], 2, np.random.default_rng(1))
        t0 = time.perf_counter()
        op.process_batch(recs)
        rate[m] = len(recs) / (time.perf_counter() - t0)
        pred = [{**r, "train": False} for r in recs]
        t0 = time.perf_counter()
        op.process_batch(pred)
        rate[m + "_predict"] = len(pred) / (time.perf_counter() - t0)
    return step, rate


def _plot(summary, lam_curves, path_acc, path_lam):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 3.8))
    FigureCanvasAgg(fig)
    panels = sorted({(d, b) for d, b, _ in summary})
    for k, (d, b) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        arms = [a for dd, bb, a in summary if (dd, bb) == (d, b)]
        means = [mean_ci(np.array(summary[(d, b, a)]) * 100) for a in arms]
        ax.bar(range(len(arms)), [m for m, _ in means], yerr=[h for _, h in means], capsize=3)
        ax.set_xticks(range(len(arms)), arms, rotation=30, fontsize=8)
        ax.set_title(f"{d}, buffer {b}" if b else d, fontsize=9)
        ax.set_ylim(0, 100)
        if k == 0:
            ax.set_ylabel("class-IL accuracy after last task (%)")
    fig.tight_layout()
    fig.savefig(path_acc, dpi=100)
    fig = Figure(figsize=(6, 3.8))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for label, curves in lam_curves.items():
        arr = np.array(curves)
        ax.plot(range(1, arr.shape[1] + 1), arr.mean(0), marker="o", label=label)
    ax.set_xlabel("task")
    ax.set_ylabel("lambda_t (mean over seeds)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path_lam, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="one seed, few steps: a smoke run")
    ap.add_argument("--kappa", type=float, default=None, help="skip the kappa choice")
    ap.add_argument("--out", default=str(RESULTS / "cila.md"))
    ap.add_argument("--speed-only", action="store_true",
                    help="only the step-time ratio, at batches of 32 and 128")
    ap.add_argument("--repeats", type=int, default=1,
                    help="--speed-only: independent runs per batch size (median and range)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.speed_only:
        print("| batch (+ replayed) | run | ER step ms | CILA step ms | ratio | "
              "CPU-time ratio |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: |")
        ratios: dict = {}
        for b in (32, 128):
            for r in range(args.repeats):
                step, _ = speed(200, b)
                ratios.setdefault(b, []).append((step["cila"] / step["er"],
                                                 step["cila_cpu"] / step["er_cpu"]))
                print(f"| {b} (+{b}) | {r + 1} | {1000 * step['er']:.2f} | "
                      f"{1000 * step['cila']:.2f} | {ratios[b][-1][0]:.2f} | "
                      f"{ratios[b][-1][1]:.2f} |", flush=True)
        if args.repeats > 1:
            for b, rs in ratios.items():
                wall, cpu = np.array(rs).T
                print(f"batch {b}: ratio median {np.median(wall):.2f} (range {wall.min():.2f}-"
                      f"{wall.max():.2f}), CPU-time ratio median {np.median(cpu):.2f} (range "
                      f"{cpu.min():.2f}-{cpu.max():.2f}), {len(rs)} runs")
        return
    seeds = list(range(1 if args.quick else args.seeds))
    steps = {"split-digits": 2 if args.quick else 6, "split-mnist1d": 2 if args.quick else 4,
             "permuted-digits": 2 if args.quick else 6}
    started = time.perf_counter()
    lines: list[str] = []

    # kappa: chosen on held-out seed 100 of Split-Digits (class-IL, buffer 50).
    if args.kappa is None:
        grid = [1.0, 5.0, 10.0, 20.0]
        digits100 = split_tasks(load_digits_data(100))
        tune = {k: run_stream(digits100, "cila", 50, 100, steps["split-digits"], k)
                for k in grid}
        kappa = max(grid, key=lambda k: np.nanmean(tune[k]["R_cil"][-1]))
        lines += ["### kappa, chosen on held-out seed 100 (Split-Digits, class-IL, buffer 50)",
                  "", "| kappa | class-IL acc | lambda_t |", "| ---: | ---: | --- |"]
        for k in grid:
            lam = ", ".join(f"{v:.2f}" for v in tune[k]["lambdas"])
            lines.append(f"| {k:g} | {100 * np.nanmean(tune[k]['R_cil'][-1]):.1f} | {lam} |")
        lines += ["", f"Chosen: kappa = {kappa:g}.", ""]
    else:
        kappa = args.kappa

    configs = [("split-digits", [20, 50]), ("split-mnist1d", [50, 100])]
    summary: dict = {}
    lam_curves: dict = {}
    per_seed: dict = {}
    paired = ["| stream | buffer | difference | class-IL (points) | task-IL (points) |",
              "| --- | ---: | --- | ---: | ---: |"]
    table = ["| stream | buffer | arm | class-IL acc | class-IL forgetting | task-IL acc | "
             "task-IL forgetting | prequential acc | lambda_t (mean) |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, buffers in configs:
        loader = load_digits_data if name == "split-digits" else load_mnist1d_data
        data = {s: split_tasks(loader(s)) for s in seeds}
        ft = [run_stream(data[s], "finetune", 0, s, steps[name], kappa) for s in seeds]
        joint = [run_joint(data[s], s, steps[name]) for s in seeds]
        for b in buffers:
            arms = {"fine-tune": ft}
            for m in ("er", "co2l", "cila"):
                arms[m] = [run_stream(data[s], m, b, s, steps[name], kappa) for s in seeds]
            for arm, runs in arms.items():
                acc_c = [np.nanmean(r["R_cil"][-1]) for r in runs]
                acc_t = [np.nanmean(r["R_til"][-1]) for r in runs]
                fg_c = [forgetting(r["R_cil"]) for r in runs]
                fg_t = [forgetting(r["R_til"]) for r in runs]
                pre = [r["prequential"] for r in runs]
                lam = np.mean([r["lambdas"] for r in runs], axis=0)
                lam_s = ", ".join(f"{v:.2f}" for v in lam) if arm in ("co2l", "cila") else ""
                table.append(f"| {name} | {b if arm != 'fine-tune' else '-'} | {arm} | "
                             f"{fmt(acc_c)} | {fmt(fg_c)} | {fmt(acc_t)} | {fmt(fg_t)} | "
                             f"{fmt(pre)} | {lam_s} |")
                summary[(name, b, arm)] = acc_c
                per_seed[(name, b, arm)] = (acc_c, acc_t)
                if arm == "cila":
                    lam_curves[f"{name}, buffer {b}"] = [r["lambdas"] for r in runs]
            for ref in ("co2l", "er"):
                c = np.subtract(per_seed[(name, b, "cila")][0], per_seed[(name, b, ref)][0])
                t = np.subtract(per_seed[(name, b, "cila")][1], per_seed[(name, b, ref)][1])
                paired.append(f"| {name} | {b} | CILA - {ref} | {fmt(c)} | {fmt(t)} |")
            summary[(name, b, "joint")] = [j["acc_cil"] for j in joint]
        table.append(f"| {name} | - | joint (upper bound) | {fmt([j['acc_cil'] for j in joint])}"
                     f" | - | {fmt([j['acc_til'] for j in joint])} | - | - | |")
        print(f"{name} done at {time.perf_counter() - started:.0f} s", flush=True)

    # Domain-incremental: Permuted-Digits (all classes in every task; class-IL scoring).
    dom = ["| stream | buffer | arm | accuracy after last task | forgetting | lambda_t (mean) |",
           "| --- | ---: | --- | ---: | ---: | --- |"]
    data = {s: permuted_tasks(load_digits_data(s), s) for s in seeds}
    dom_acc = {}
    for arm, method, b in (("fine-tune", "finetune", 0), ("er", "er", 50),
                           ("co2l", "co2l", 50), ("cila", "cila", 50)):
        runs = [run_stream(data[s], method, b, s, steps["permuted-digits"], kappa)
                for s in seeds]
        dom_acc[arm] = [np.nanmean(r["R_cil"][-1]) for r in runs]
        lam = np.mean([r["lambdas"] for r in runs], axis=0)
        lam_s = ", ".join(f"{v:.2f}" for v in lam) if method in ("co2l", "cila") else ""
        dom.append(f"| permuted-digits | {b or '-'} | {arm} | "
                   f"{fmt([np.nanmean(r['R_cil'][-1]) for r in runs])} | "
                   f"{fmt([forgetting(r['R_cil']) for r in runs])} | {lam_s} |")
    for ref in ("co2l", "er"):
        d = np.subtract(dom_acc["cila"], dom_acc[ref])
        paired.append(f"| permuted-digits | 50 | CILA - {ref} | {fmt(d)} | - |")
    print(f"domain-incremental done at {time.perf_counter() - started:.0f} s", flush=True)

    step, rate = speed(20 if args.quick else 200)
    elapsed = time.perf_counter() - started
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    acc_png, lam_png = out.with_name(out.stem + "_accuracy.png"), out.with_name(
        out.stem + "_lambda.png")
    _plot(summary, lam_curves, acc_png, lam_png)
    from importlib.metadata import version

    import sklearn

    cmd = "python benchmarks/cila.py" + (" --quick" if args.quick else "") + (
        f" --kappa {args.kappa:g}" if args.kappa is not None else "")
    head = [
        "# CILA benchmark: Split-Digits, Split-mnist1d, Permuted-Digits", "",
        f"Command: `{cmd}` ({elapsed / 60:.1f} min, 1 torch thread)", "",
        f"Date: {dt.date.today().isoformat()}. Machine: {platform.machine()}, "
        f"{__import__('os').cpu_count()} cores shared with other jobs, Python "
        f"{platform.python_version()}, torch {torch.__version__}, numpy {np.__version__}, "
        f"scikit-learn {sklearn.__version__}, mnist1d {version('mnist1d')}.", "",
        f"Seeds: {len(seeds)} ({', '.join(map(str, seeds))}); ± is the 95% t-interval of the "
        "mean over seeds. Accuracies and forgetting in %.", "",
        f"Setup: {COMMON}; gradient steps per mini-batch: {steps}; CILA kappa = {kappa:g}, "
        "lambda form max.", "",
    ]
    body = ["## Class- and task-incremental", "", *table, "",
            f"![accuracy]({acc_png.name}) ![lambda]({lam_png.name})", "",
            "## Domain-incremental (Permuted-Digits, 5 tasks x 10 classes)", "", *dom, "",
            "## CILA against Co2L and ER, paired by seed (accuracy after the last task)", "",
            *paired, "",
            "## Speed", "",
            "One training step (32 current + 32 replayed samples, the same MLP encoder; "
            "median of 200, interleaved, second task so CILA has its frozen model; "
            "subnormals flushed, as inside `process`):", "",
            "| step | ms | ratio to ER | CPU-time ratio to ER |", "| --- | ---: | ---: | ---: |",
            f"| ER (cross-entropy, one view) | {1000 * step['er']:.2f} | 1.00 | 1.00 |",
            f"| CILA (two views, frozen model, SupCon + IRD, probe steps) | "
            f"{1000 * step['cila']:.2f} | {step['cila'] / step['er']:.2f} | "
            f"{step['cila_cpu'] / step['er_cpu']:.2f} |", "",
            "Operator records/s on a third-task stream (test-then-train, batches of 32, one "
            "step each) and predict-only (`train: false`):", "",
            "| operator | test-then-train rec/s | predict-only rec/s |",
            "| --- | ---: | ---: |",
            f"| cila | {rate['cila']:,.0f} | {rate['cila_predict']:,.0f} |",
            f"| er | {rate['er']:,.0f} | {rate['er_predict']:,.0f} |", ""]
    out.write_text("\n".join(head + lines + body))
    print(out.read_text())


if __name__ == "__main__":
    main()
