"""Live vs restart peak RSS of a stage's state, without a broker (issue 38, item 1).

``python benchmarks/restart_memory.py [--keys 200000]`` runs, each in its own process:

1. **live**: ``--keys`` one-record ``cs`` keys (the issue's "every record has a new key")
   through a :class:`~shiftwatch.deploy.executor.StageExecutor` with the stage's
   :class:`~shiftwatch.deploy.kafka.checkpoint.Checkpointer` (``every_records`` 10,000, the
   default), whose changelog messages go to a file instead of a broker; the process's peak
   RSS and the changelog's bytes;
2. **restart**: a fresh process reads that changelog back (``restore`` as a stage does on
   assignment, messages let go as they are read) and loads it into a fresh stage
   (``checkpoint.restore: lazy``, the default: each key kept as its bytes until its next
   record, which never comes); its peak RSS.

Arms: ``checkpoint.compress`` true (the default) and false; with ``--max-keys`` also a stage
with ``state: {max_keys: N}``. The Kafka client's own buffers are not in these numbers
(``benchmarks/key_expiry.py`` measures ``shiftwatch run`` on the bundled broker).
Results: ``benchmarks/results/restart_memory.md``.
"""

from __future__ import annotations

import argparse
import gc
import platform
import resource
import struct
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Done:
    is_done = True
    exception = None

    def failed(self):
        return False

    def get(self, timeout=None):
        return None


class _FileLog:
    """A producer that appends (key, value) to a file (length-prefixed; -1: a tombstone)."""

    def __init__(self, fh):
        self.fh, self.bytes, self.tombstones = fh, 0, 0

    def send(self, topic, key=None, value=None, partition=None):
        v = b"" if value is None else value
        self.fh.write(struct.pack("<ii", len(key), -1 if value is None else len(v)) + key + v)
        self.bytes += len(v)
        self.tombstones += value is None
        return _Done()

    def flush(self, timeout=None):
        pass


class _Consumer:
    def commit(self, offsets):
        pass

    def commit_async(self, offsets, callback=None):
        pass


def _stage(compress: bool, max_keys: int | None):
    from shiftwatch.deploy.executor import RunSummary, StageExecutor
    from shiftwatch.deploy.expiry import Expiry
    from shiftwatch.deploy.kafka.checkpoint import Checkpointer, PartitionTask
    from shiftwatch.operators import create

    ex = StageExecutor([create("cs")], expiry=Expiry(max_keys=max_keys) if max_keys else None)
    task = PartitionTask(partition=0, executor=ex, dirty=[set()])
    cp = Checkpointer("in", "in.changelog", {
        "every_records": 10_000, "every_seconds": 1e9, "chunk_bytes": 512 * 1024,
        "patches": True, "compress": compress}, eos=False, tasks={0: task},
        summary=RunSummary(), stage_name="bench")
    cp.consumer = _Consumer()
    return ex, task, cp


def live(keys: int, compress: bool, max_keys: int | None, path: str) -> dict:
    ex, task, cp = _stage(compress, max_keys)
    t0 = time.perf_counter()
    with open(path, "wb") as fh:
        cp.producer = _FileLog(fh)
        for b in range(keys // 1000):
            batch = [{"key": f"k{b * 1000 + i}", "value": 0.5, "ts": float(b * 1000 + i),
                      "offset": b * 1000 + i} for i in range(1000)]
            ex.process(batch, dirty=task.dirty)
            task.next_offset = batch[-1]["offset"] + 1
            task.since_checkpoint += len(batch)
            cp.after_batch()
            cp.advance(task, until=0)
        cp.checkpoint([0])
    return {"seconds": time.perf_counter() - t0, "peak_mb": _peak_mb(),
            "changelog_mb": cp.producer.bytes / 1e6, "tombstones": cp.producer.tombstones,
            "keys_held": len(ex.operators[0]), "keys_evicted": ex.summary.keys_evicted}


def _messages(path: str):
    """The file's (key, value) messages, read one at a time (as a consumer polls them)."""
    with open(path, "rb") as fh:
        while head := fh.read(8):
            kl, vl = struct.unpack("<ii", head)
            key = fh.read(kl)
            yield key, (None if vl < 0 else fh.read(vl))


def restart(compress: bool, max_keys: int | None, path: str) -> dict:
    from shiftwatch.deploy.kafka.changelog import restore

    ex, task, cp = _stage(compress, max_keys)
    base = _peak_mb()
    t0 = time.perf_counter()
    # restore keeps the newest message per key as it reads (ChangelogReader.read does the
    # same with each poll's messages)
    r = restore(_messages(path), "in", 0)
    compacted = (sum(len(v) for s in r.states for v in s.values()) / 1e6) if r else 0.0
    cp.load(task, r)
    del r
    gc.collect()
    return {"seconds": time.perf_counter() - t0, "peak_mb": _peak_mb(), "imports_mb": base,
            "keys_restored": len(ex.operators[0]), "compacted_mb": compacted}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--max-keys", type=int, default=10_000)
    ap.add_argument("--output", default=str(ROOT / "benchmarks/results/restart_memory.md"))
    ap.add_argument("--one", nargs=4, metavar=("MODE", "COMPRESS", "MAX_KEYS", "PATH"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        import json

        mode, comp, mk, path = args.one
        comp, mk = comp == "1", (int(mk) or None)
        out = live(args.keys, comp, mk, path) if mode == "live" else restart(comp, mk, path)
        print(json.dumps(out))
        return
    import json
    import tempfile

    rows = []
    for compress, max_keys in ((True, 0), (False, 0), (True, args.max_keys)):
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "changelog.bin")
            got = {}
            for mode in ("live", "restart"):
                res = subprocess.run([sys.executable, __file__, "--keys", str(args.keys),
                                      "--one", mode, "1" if compress else "0", str(max_keys),
                                      path], capture_output=True, text=True, check=True)
                got[mode] = json.loads(res.stdout.strip().splitlines()[-1])
        rows.append((compress, max_keys, got))
        print(compress, max_keys, got, flush=True)
    import numpy

    lines = [
        "# Live vs restart memory of a stage's state (no broker)", "",
        f"`python benchmarks/restart_memory.py --keys {args.keys} --max-keys {args.max_keys}`"
        f", {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()} "
        f"({__import__('os').cpu_count()} cores), Python {platform.python_version()}, "
        f"numpy {numpy.__version__}.", "",
        f"{args.keys:,} one-record `cs` keys (every record a new key) through the stage's "
        "executor and checkpointer (every 10,000 records); the changelog goes to a file. "
        "*restart*: a fresh process restores it (lazy) with no new record. Peak RSS is each "
        "process's own (`ru_maxrss`), imports included (about "
        f"{rows[0][2]['restart']['imports_mb']:.0f} MB).", "",
        "| checkpoint.compress | state.max_keys | live peak RSS MB | restart peak RSS MB | "
        "restart / live | changelog written MB | restored states MB | tombstones | keys held "
        "| keys restored | live s | restart s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for compress, max_keys, g in rows:
        lv, rs = g["live"], g["restart"]
        lines.append(
            f"| {str(compress).lower()} | {max_keys or '-'} | {lv['peak_mb']:.0f} | "
            f"{rs['peak_mb']:.0f} | {rs['peak_mb'] / lv['peak_mb']:.2f} | "
            f"{lv['changelog_mb']:.1f} | {rs['compacted_mb']:.1f} | {lv['tombstones']:,} | "
            f"{lv['keys_held']:,} | {rs['keys_restored']:,} | {lv['seconds']:.1f} | "
            f"{rs['seconds']:.1f} |")
    Path(args.output).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
