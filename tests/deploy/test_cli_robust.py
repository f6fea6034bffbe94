"""Replay and calibrate on hostile input: damaged files, huge keys and numbers, a full disk.

Each run must finish (or stop with one line), keep every record it could read, dead-letter
the rest with a reason, and leave no partial file behind.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from shiftwatch.deploy.cli import main


def _readings(n: int = 400, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    shift = [4.0 if i > n // 2 else 0.0 for i in range(n)]
    return ["ts,sensor,temp"] + [f"{i},s{i % 2},{20 + rng.gauss(0, 1) + shift[i]:.4f}"
                                 for i in range(n)]


def _replay(path: Path, out: Path, *extra: str) -> int:
    return main(["replay", str(path), "--source-opt", "value=temp", "--source-opt", "key=sensor",
                 "--source-opt", "ts=ts", "--operator", "river:PageHinkley",
                 "--param", "threshold=10", "--out", str(out), "--no-progress", *extra])


def _dead(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "dead_letters.jsonl").read_text().splitlines()]


# ---- 1. damaged .gz ------------------------------------------------------------------------


def test_replay_of_a_truncated_gz_finishes_with_the_summary(tmp_path, capsys):
    data = gzip.compress(("\n".join(_readings(4000)) + "\n").encode())
    path = tmp_path / "readings.csv.gz"
    path.write_bytes(data[: len(data) * 2 // 3])
    out = tmp_path / "run"
    assert _replay(path, out, "--no-plots") == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "EOFError" not in captured.err
    (dead,) = _dead(out)
    assert dead["reason"].startswith("file is truncated after line ")
    assert dead["reason"].endswith(": compressed stream ended early")
    kept = len((out / "outputs.jsonl").read_text().splitlines())
    assert kept > 2000 and dead["origin"]["line"] == kept + 2  # header, then the kept lines
    assert f"{kept + 1} records in " in captured.out and "1 dead letters" in captured.out
    assert "dead letters -> " in captured.out and "file is truncated after line" in captured.out
    assert (out / "report.json").exists()


def test_replay_of_a_gz_with_a_bad_crc_finishes_with_the_summary(tmp_path, capsys):
    data = bytearray(gzip.compress(("\n".join(_readings()) + "\n").encode()))
    data[-8] ^= 0x01  # the stored CRC-32
    path = tmp_path / "readings.csv.gz"
    path.write_bytes(bytes(data))
    out = tmp_path / "run"
    assert _replay(path, out, "--no-plots") == 0  # was exit 2 without a summary
    text = capsys.readouterr().out
    assert "401 records in " in text and "400 outputs" in text and "1 dead letters" in text
    (dead,) = _dead(out)
    assert dead["reason"].startswith("gzip CRC check failed after line 401 (0x")


# ---- 3. a 1 MB key ------------------------------------------------------------------------


def test_replay_with_plots_of_a_1mb_key_finishes_in_seconds(tmp_path, capsys):
    import time

    huge = "k" * 1_000_000
    rng = random.Random(8)
    path = tmp_path / "keys.jsonl"
    with path.open("w") as f:
        for i in range(200):
            key = huge if i % 10 == 3 else f"s{i % 3}"
            f.write(json.dumps({"key": key, "v": rng.gauss(0, 1) + (3 if i > 100 else 0)}) + "\n")
    out = tmp_path / "run"
    t0 = time.perf_counter()
    rc = main(["replay", str(path), "--source-opt", "value=v", "--source-opt", "key=key",
               "--operator", "river:PageHinkley", "--param", "threshold=2",
               "--param", "min_instances=5", "--out", str(out), "--no-progress"])
    seconds = time.perf_counter() - t0
    assert rc == 0
    assert seconds < 60, f"{seconds:.0f} s (it took 249 s when the plots drew the whole key)"
    text = capsys.readouterr().out
    assert len(text) < 10_000 and "kkkk\u2026#" in text  # the alarm table cut the key
    assert (out / "series.png").stat().st_size > 0 and (out / "statistic.png").exists()
    assert (out / "report.html").stat().st_size < 1_000_000
    outputs = [json.loads(line) for line in (out / "outputs.jsonl").read_text().splitlines()]
    assert sum(o["key"] == huge for o in outputs) == 20  # outputs keep the whole key
