"""``shiftwatch compare``: several detector chains over one log, side by side.

Choosing a detector means replaying the same history through several candidates. ``compare``
reads and decodes the source once, keeps the decoded records (about 0.3 KB each, up to
``--cache-records``; beyond that a file source is read again for each chain, and the
output says so), and runs each chain (``--chain "standardize burn_in=30 -> cs"``) over them
as ``shiftwatch replay`` would: the same outputs, dead letters and report per chain, in
``DIR/<n>-<chain>/``. Then one table compares them (records/s of each chain over the same
records, alarms and, with labels, the scores), printed and written to ``DIR/compare.md``
and ``DIR/compare.json``. Outputs default to alarms only (``--emit all`` for every output).

A chain that ``shiftwatch replay`` runs on its columnar path (a CSV or JSON Lines file through
``cs``, ``shape``, ``river:NAME`` or ``standardize -> river:NAME``:
:mod:`~shiftwatch.deploy.columnar`) reads the file itself, in column batches: reading is
then a small part of its time (millions of lines a second), far less than keeping decoded
records for it. The records are decoded once, and kept, only for the chains that need them.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shiftwatch.deploy.errors import UserError, user_input
from shiftwatch.records import DeadLetter

__all__ = ["cmd_compare", "parse_chain"]

#: Decoded records kept for the chains after the first (beyond: the file is read again).
CACHE_RECORDS = 5_000_000


def parse_chain(text: str) -> list[tuple[str, list[str]]]:
    """``"standardize burn_in=30 -> cs alpha=0.01"`` -> ``[(name, ["k=v", ...]), ...]``.

    >>> parse_chain("standardize burn_in=30 -> cs")
    [('standardize', ['burn_in=30']), ('cs', [])]
    """
    parts = [p.strip() for p in text.split("->")]
    if not text.strip() or not all(parts):
        raise UserError(f"--chain {text!r}: expected 'NAME [K=V ...] [-> NAME [K=V ...] ...]'")
    out = []
    for part in parts:
        try:
            words = shlex.split(part)
        except ValueError as exc:
            raise UserError(f"--chain {text!r}: {exc}") from None
        out.append((words[0], words[1:]))
    return out


class _Cached:
    """The source's items, decoded once, handed to each chain as fresh copies."""

    def __init__(self, source: Any, items: list | None):
        self._source, self._items = source, items
        for name in ("path", "name", "columns", "annotations"):
            if hasattr(source, name):
                setattr(self, name, getattr(source, name))

    @property
    def origins(self) -> Any:
        return getattr(self._source, "origins", None)

    @property
    def blank_lines(self) -> int:
        return getattr(self._source, "blank_lines", 0)

    def __iter__(self) -> Iterator:
        if self._items is None:  # too many to keep: the source again
            yield from self._source
            return
        for item in self._items:
            if isinstance(item, DeadLetter):
                yield DeadLetter(raw=item.raw, reason=item.reason, origin=dict(item.origin))
            elif isinstance(item, dict):
                yield dict(item)
            else:
                yield item

    def close(self) -> None:
        pass


def _slug(chain: list[tuple[str, list[str]]]) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(name for name, _ in chain))[:60]


def cmd_compare(args: Any) -> int:
    from shiftwatch.deploy.cli_args import build_operators as _build_operators
    from shiftwatch.deploy.cli_args import load_labels, parse_params
    from shiftwatch.deploy.columnar import columnar_run
    from shiftwatch.deploy.console import print_failed
    from shiftwatch.deploy.local import Pipeline
    from shiftwatch.sinks import DeadLetterSink, EvaluationSink, JsonlSink
    from shiftwatch.sinks.atomic_file import WriteFailed
    from shiftwatch.streams import open_source

    if not args.chain or len(args.chain) < 1:
        raise UserError("compare needs at least one --chain (e.g. --chain cs --chain "
                        "'standardize -> river:ADWIN')")
    chains = [parse_chain(c) for c in args.chain]
    for chain in chains:  # every chain is checked before anything is read
        _build_operators([{"name": n, "params": p} for n, p in chain])
    if args.source.startswith("kafka:"):
        raise UserError("compare reads files and built-in streams; for a topic, replay it "
                        "into a file first (shiftwatch consume) or run replay per detector")
    source_opts = parse_params(args.source_opt, "--source-opt")

    def open_it() -> Any:
        with user_input():
            return open_source(args.source, **source_opts)

    source = open_it()
    annotations = getattr(source, "annotations", None)
    if args.labels:
        annotations = load_labels(args.labels, getattr(source, "name", None))
    read_s = 0.0
    items: list | None = None
    cached = None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, failed = [], {}
    in_columns = 0  # chains that read the file in column batches
    for i, chain in enumerate(chains, 1):
        ops = _build_operators([{"name": n, "params": p} for n, p in chain])
        # (the probe wraps ops in fresh Keyed and runs nothing: ops stay as built)
        columns = columnar_run(Pipeline(source, ops, progress=False)) is not None
        if columns:  # the file in column batches (millions of lines/s): read for the chain
            in_columns += 1
            if i > 1:
                source = open_it()
        elif cached is None:  # the records, decoded once for the chains that need them
            t0 = time.perf_counter()
            items = []
            with user_input():
                for item in source:
                    items.append(item)
                    if len(items) > args.cache_records:
                        items = None
                        break
            read_s = time.perf_counter() - t0
            if items is None and not hasattr(source, "path"):
                raise UserError(f"{args.source}: over --cache-records {args.cache_records:,} "
                                "records and not a file that can be read again: compare fewer "
                                "records")
            cached = _Cached(source, items)
        label = " -> ".join(" ".join([n, *p]) for n, p in chain)
        where = out / f"{i}-{_slug(chain)}"
        with user_input():
            evaluation = EvaluationSink(where, annotations=annotations, name=getattr(
                source, "name", args.source), operator=label, plots=not args.no_plots,
                parameters={"source": args.source, "chain": label, "labels": args.labels},
                channels=getattr(source, "columns", None), operators=ops)
        outputs = JsonlSink(where / "outputs.jsonl", alarms_only=args.emit == "alarms")
        dead = DeadLetterSink(where / "dead_letters.jsonl")
        try:
            summary = Pipeline(source if columns else cached, ops, [outputs, evaluation],
                               dead_letters=dead, batch_size=args.batch_size,
                               progress=False).run()
        except WriteFailed as exc:
            failed.update(exc.failed)
            break
        report = evaluation.report or {}
        rows.append({"chain": label, "dir": str(where), "seconds": summary.seconds,
                     "records_per_s": summary.rate, "alarms": summary.alarms,
                     "dead_letters": summary.dead_letters,
                     "complete": report.get("complete", True),
                     **{k: report.get("summary", {}).get(k) for k in (
                         "f1", "f1_1pct", "covering", "false_alarms", "missed")}})
        print(f"[{i}/{len(chains)}] {label}: {summary.line()}", flush=True)
    if cached is None:
        how = "read in column batches by each chain"
    elif items is not None:
        k = len(chains) - in_columns
        how = "read once" + (f" for {k} chain{'s' * (k != 1)} (the other {in_columns} read "
                             "the file in column batches)" if in_columns else "")
    else:
        how = f"read again for each chain (over --cache-records {args.cache_records:,})"
    _write_table(out, args, rows, read_s, how, items)
    if print_failed(failed, None):
        return 2
    return 0


def _fmt(v: Any, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def _write_table(out: Path, args: Any, rows: list[dict], read_s: float, how: str,
                 items: list | None) -> None:
    n = len(items) if items is not None else None
    head = (f"{args.source}: {n:,} items {how}, decoded in {read_s:.2f} s" if n is not None
            else f"{args.source}: {how}")
    lines = [head, "", "| chain | records/s | alarms | F1 | F1@1% | covering | false alarms | "
             "missed |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['chain']} | {r['records_per_s']:,.0f} | {r['alarms']} | "
                     f"{_fmt(r['f1'])} | {_fmt(r['f1_1pct'])} | {_fmt(r['covering'])} | "
                     f"{_fmt(r['false_alarms'], 'd')} | {_fmt(r['missed'], 'd')} |")
    if rows and all(r["f1"] is None for r in rows):
        lines += ["", "(no labels: give --labels, or a source with annotations, to score)"]
    text = "\n".join(lines) + "\n"
    sys.stdout.write("\n" + text)
    (out / "compare.md").write_text(text)
    (out / "compare.json").write_text(json.dumps(
        {"source": args.source, "items": n, "read": how, "read_seconds": read_s,
         "chains": rows}, indent=2, default=str) + "\n")


def add_parser(sub: Any, param_help: str) -> None:
    """The ``compare`` subcommand (see the module notes)."""
    c = sub.add_parser("compare", help="run several detector chains over one log and compare "
                       "their alarms and scores")
    c.add_argument("source", help="a .csv/.jsonl file, river:NAME or synth:NAME")
    c.add_argument("--chain", action="append", metavar="CHAIN",
                   help="a detector chain, e.g. 'cs' or 'standardize burn_in=30 -> "
                        "river:ADWIN delta=0.01' (repeat for each candidate)")
    c.add_argument("--source-opt", action="append", metavar="K=V", help=param_help)
    c.add_argument("--labels", help="true change points, as for replay")
    c.add_argument("--out", required=True, help="output directory (one folder per chain)")
    c.add_argument("--emit", choices=["all", "alarms"], default="alarms",
                   help="what each chain's outputs.jsonl holds (default: alarms only)")
    c.add_argument("--batch-size", type=int, default=1000, help="records per micro-batch")
    c.add_argument("--no-plots", action="store_true", help="no PNG plots")
    c.add_argument("--cache-records", type=int, default=CACHE_RECORDS, metavar="N",
                   help="keep at most N decoded records for the chains that take them "
                        f"(default {CACHE_RECORDS:,}; beyond, a file is read again)")
    c.set_defaults(func=cmd_compare)
