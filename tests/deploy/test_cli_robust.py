"""Replay and calibrate on hostile input: damaged files, huge keys and numbers, a full disk.

Each run must finish (or stop with one line), keep every record it could read, dead-letter
the rest with a reason, and leave no partial file behind.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

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


# ---- 4. a full disk -----------------------------------------------------------------------


def _no_partial_files(out: Path) -> dict[str, int]:
    """Every file in ``out`` by size; none is a temporary, none is empty but the dead letters."""
    files = {p.name: p.stat().st_size for p in out.iterdir()}
    assert not [n for n in files if n.endswith(".tmp")], files
    assert all(size > 0 for name, size in files.items() if name != "dead_letters.jsonl"), files
    for name in files:
        if name.endswith(".png"):
            assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        elif name.endswith(".json"):
            json.loads((out / name).read_text())
        elif name.endswith(".jsonl"):
            [json.loads(line) for line in (out / name).read_text().splitlines()]
    return files


def _wrote(stdout: str) -> list[str]:
    (line,) = [x for x in stdout.splitlines() if x.startswith("wrote ")]
    return [Path(p).name for p in line[len("wrote "):].split(", ")]


def test_replay_on_a_full_disk_says_what_it_wrote_and_leaves_no_part(tmp_path, capsys,
                                                                     monkeypatch):
    import errno
    import io

    from shiftwatch.sinks import atomic_file

    class Full(io.FileIO):  # each file may take 30 kB, like a disk with that much room
        written = 0

        def write(self, b):
            if self.written + len(b) > 30_000:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += len(b)
            return super().write(b)

    monkeypatch.setattr(atomic_file, "_disk_file", lambda fd: Full(fd, "w"))
    path = tmp_path / "readings.csv"
    path.write_text("\n".join(_readings(3000)) + "\n")
    out = tmp_path / "run"
    rc = _replay(path, out, "--batch-size", "100")
    captured = capsys.readouterr()
    assert rc == 2 and "Traceback" not in captured.err
    files = _no_partial_files(out)
    assert "outputs.jsonl" not in files  # 3000 outputs do not fit: none of it is left
    assert "report.json" in files and "dead_letters.jsonl" in files
    errors = captured.err.strip().splitlines()
    assert errors[0] == (f"shiftwatch: error: cannot write {out / 'outputs.jsonl'}: No space "
                         "left on device (the run stopped there)")
    assert all(e.startswith("shiftwatch: error: cannot write ") and
               e.split(": ")[3].startswith("No space left on device") for e in errors)
    failed = {Path(e.split(": ")[2][len("cannot write "):]).name for e in errors}
    assert failed & set(files) == set()  # what failed is not there
    pngs = {n for n in files if n.endswith(".png")}
    assert set(_wrote(captured.out)) == set(files) - pngs - {"dead_letters.jsonl"} | (
        {"*.png"} if pngs else set())
    assert "series.png" in failed, (files, errors)  # larger than 30 kB as well


@pytest.fixture
def small_disk(tmp_path):
    """A 64 kB tmpfs at tmp_path/disk (needs root and a kernel that lets it mount)."""
    import shutil
    import subprocess

    mount = tmp_path / "disk"
    mount.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.strip() or proc.returncode}"
                    " (the monkeypatched full-disk test still runs)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_replay_onto_a_real_full_disk_leaves_no_part(small_disk, tmp_path, capsys):
    path = tmp_path / "readings.csv"
    path.write_text("\n".join(_readings(3000)) + "\n")
    out = small_disk / "run"
    rc = _replay(path, out)
    captured = capsys.readouterr()
    assert rc == 2 and "Traceback" not in captured.err
    files = _no_partial_files(out)
    assert "outputs.jsonl" not in files
    errors = captured.err.strip().splitlines()
    assert errors and all(": No space left on device" in e for e in errors)
    assert "outputs.jsonl: No space left on device (the run stopped there)" in errors[0]
    written = set(_wrote(captured.out)) if "wrote " in captured.out else set()
    assert {n for n in written if n != "*.png"} <= set(files)


# ---- 5. calibrate on huge numbers and failing sources --------------------------------------


def _calibrate(path, out, *extra):
    return main(["calibrate", str(path), "--source-opt", "value=temp", "--operator",
                 "river:PageHinkley", "--budget", "1/100", "--grid", "3", "--delay-runs", "0",
                 "--out", str(out), *extra])


def test_calibrate_skips_a_5000_digit_cell_as_a_dead_letter(tmp_path, capsys):
    rows = _readings(600)
    rows[10] = "9,s1," + "1" * 5000
    rows[20] = "19,s1," + "2" * 5000 + ".5"
    path = tmp_path / "readings.csv"
    path.write_text("\n".join(rows) + "\n")
    assert _calibrate(path, tmp_path / "cal") == 0
    captured = capsys.readouterr()
    assert "skipped 2 records the history cannot use: 2 x temp: number has more than 100 " \
           "digits" in captured.out
    assert captured.err == ""
    info = json.loads((tmp_path / "cal" / "calibration.json").read_text())["info"]
    assert info["unusable"] == 2 and info["records"] == 598


class _Failing:
    """A source that yields good records, then raises instead of yielding a dead letter."""

    name = "failing"
    annotations = None

    def __init__(self, error):
        self.error = error

    def __iter__(self):
        rng = random.Random(2)
        for i in range(300):
            yield {"key": None, "ts": float(i), "value": rng.gauss(0, 1), "offset": i}
        raise self.error


def test_calibrate_a_source_raising_bad_input_is_one_line_naming_the_record(tmp_path, capsys,
                                                                            monkeypatch):
    import shiftwatch.streams
    from shiftwatch.records import BadInput

    monkeypatch.setattr(shiftwatch.streams, "open_source",
                        lambda spec, **kw: _Failing(BadInput("value has 5000 digits")))
    assert _calibrate("fake.csv", tmp_path / "cal") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["shiftwatch: error: fake.csv: cannot read past record 300: value has 5000 "
                   "digits"]


def test_calibrate_a_source_failing_with_a_python_error_is_a_bug_with_its_traceback(
        tmp_path, capsys, monkeypatch):
    import shiftwatch.streams

    error = ValueError("Exceeds the limit (4300 digits) for integer string conversion")
    monkeypatch.setattr(shiftwatch.streams, "open_source", lambda spec, **kw: _Failing(error))
    assert _calibrate("fake.csv", tmp_path / "cal") == 1  # not "shiftwatch: error: Exceeds..."
    err = capsys.readouterr().err
    assert "Traceback" in err and "shiftwatch: internal error: RuntimeError: fake.csv: reading " \
        "record 300 failed: ValueError: Exceeds the limit" in err


def test_calibrate_on_a_full_disk_says_which_file_it_could_not_write(tmp_path, capsys,
                                                                    monkeypatch):
    import errno
    import io

    from shiftwatch.sinks import atomic_file

    class Full(io.FileIO):  # room for the small YAML fragment, not for calibration.json
        def write(self, b):
            if len(b) > 400:
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(b)

    monkeypatch.setattr(atomic_file, "_disk_file", lambda fd: Full(fd, "w"))
    path = tmp_path / "readings.csv"
    path.write_text("\n".join(_readings(600)) + "\n")
    out = tmp_path / "cal"
    assert _calibrate(path, out) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        f"shiftwatch: error: cannot write {out / 'calibration.json'}: No space left on device"]
    assert f"wrote {out / 'calibrated.yaml'}" in captured.out
    assert sorted(p.name for p in out.iterdir()) == ["calibrated.yaml"]


def test_parameters_that_size_memory_are_bounded_in_one_line(capsys, tmp_path):
    from shiftwatch.deploy.cli import main

    src = tmp_path / "s.csv"
    src.write_text("value\n" + "".join(f"{i % 7}\n" for i in range(50)))
    for op, param, words in (("river:ADWIN", "max_buckets=1000000000", "must be in [1, 1,000]"),
                             ("river:KSWIN", "window_size=1000000000000", "window_size must"),
                             ("standardize", "burn_in=1000000000000", "burn_in must be"),
                             ("window_covariance", "window=1000000000000", "window must be"),
                             ("embed", "d=1000000000", "d must be")):
        rc = main(["replay", str(src), "--operator", op, "--param", param,
                   "--out", str(tmp_path / "r"), "--quiet", "--no-progress"])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and words in err[0], (op, err)


def test_running_out_of_memory_is_one_line_not_an_internal_error(capsys, tmp_path,
                                                                  monkeypatch):
    # the report of a fleet too large for memory (its per-key aggregation) used to end in
    # "internal error ... please report it"
    from shiftwatch.deploy.cli import main
    from shiftwatch.sinks.evaluation import EvaluationSink

    def exhausted(self):
        raise MemoryError("Unable to allocate 7.45 GiB for an array")

    monkeypatch.setattr(EvaluationSink, "_build_report", exhausted)
    src = tmp_path / "s.csv"
    src.write_text("value\n" + "".join(f"{i % 7}\n" for i in range(50)))
    rc = main(["replay", str(src), "--operator", "standardize", "--out", str(tmp_path / "r"),
               "--quiet", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "internal error" not in err and len(err.strip().splitlines()) == 1
    assert "out of memory (Unable to allocate 7.45 GiB" in err and "evaluation.py" in err
    assert (tmp_path / "r" / "outputs.jsonl").stat().st_size > 0  # what was written stays


def test_sigterm_during_a_paced_replay_finishes_the_files_and_says_partial(tmp_path):
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    src = tmp_path / "s.csv"
    # one far-future timestamp: a paced replay used to sleep ~10**7 s there
    rows = [f"{i},{i % 5}" for i in range(100)] + ["1000000000,1"] + \
        [f"{1000000000 + i},{i % 5}" for i in range(100)]
    src.write_text("ts,value\n" + "\n".join(rows) + "\n")
    out = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "shiftwatch.deploy.cli", "replay", str(src),
                             "--source-opt", "ts=ts", "--operator", "river:ADWIN", "--speed",
                             "1000", "--batch-size", "10", "--out", str(out), "--no-plots",
                             "--no-progress", "--quiet"], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not list(out.glob("*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.1)  # until the replay writes: then it waits at the far-future record
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert not list(out.glob("*.tmp")), list(out.iterdir())
    report = json.loads((out / "report.json").read_text())
    assert report["complete"] is False and report["incomplete"]["why"].startswith("interrupted")
