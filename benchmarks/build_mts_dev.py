"""Multichannel segmentation series for choosing (issue 48, item 3), built as TSSB was built
from classification sets: instances of different classes, concatenated, the boundaries
between them the true changes.

    python benchmarks/build_mts_dev.py [--aeon-data DIR] [--out benchmarks/data/mts-dev.json]

Sources: the labelled multichannel recordings the `aeon` package ships in its wheel
(`aeon/datasets/data`; aeon is installed in ClaSS's peer virtual environment,
`benchmarks/peers/peer_env.py`, and its default folder is found there):

* **BasicMotions** (UEA archive; a smart watch's 3-D accelerometer and gyroscope, 6
  channels, 10 Hz, four activities: standing, walking, running, badminton; 80 recordings of
  100 samples). 10 series of 4-6 recordings: segments of 100 records, series of 400-600.
* **JapaneseVowels** (UCI, CC BY 4.0: Kudo, Toyama & Shimbo 1999; 12 LPC cepstrum
  coefficients of nine male speakers saying "ae", 640 utterances of 7-29 frames). 10
  series of 12-20 utterances by alternating speakers: segments of 7-29 records, series of a
  few hundred, the short-segment case the issue names.

Each series alternates classes (no two neighbouring segments of the same class), picks
recordings without replacement within a series, and is seeded (``numpy`` ``default_rng(seed)``
per set, seeds fixed below), so the file is the same on every run. The file has the layout
of ``../shared/data/mocap6.json`` (``series: [{name, n, channels, values (n x d),
annotations: {"truth": [...]}}]``) and a ``provenance`` block; ``benchmarks/realdata.py``
reads it as the set ``mts-dev``. These are development series: defaults may be chosen on
them, results on them are not a test.
"""

from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "data" / "mts-dev.json"


def _default_data_dir() -> Path | None:
    hits = glob.glob(str(Path.home() / ".cache" / "shiftwatch-peers" / "class" / "lib" /
                         "python*" / "site-packages" / "aeon" / "datasets" / "data"))
    return Path(hits[0]) if hits else None


def read_ts(path: Path) -> tuple[list[np.ndarray], list[str]]:
    """A ``.ts`` file (sktime/aeon format): the instances (length x channels) and labels."""
    xs, ys, data = [], [], False
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not data:
            data = line.lower() == "@data"
            continue
        *dims, label = line.split(":")
        chans = [np.array([float(v) for v in d.split(",")]) for d in dims]
        n = min(len(c) for c in chans)
        xs.append(np.stack([c[:n] for c in chans], axis=1))
        ys.append(label.strip())
    return xs, ys


def build(xs: list[np.ndarray], ys: list[str], count: int, segments: tuple[int, int],
          seed: int, prefix: str) -> list[dict]:
    rng = np.random.default_rng(seed)
    labels = sorted(set(ys))
    by_class = {c: [i for i, y in enumerate(ys) if y == c] for c in labels}
    out = []
    for s in range(count):
        k = int(rng.integers(segments[0], segments[1] + 1))
        used: set[int] = set()
        parts, truth, prev, pos, cls = [], [], None, 0, []
        for j in range(k):
            choices = [c for c in labels if c != prev and set(by_class[c]) - used]
            c = choices[int(rng.integers(len(choices)))]
            i = int(rng.choice(sorted(set(by_class[c]) - used)))
            used.add(i)
            if j:
                truth.append(pos)
            parts.append(xs[i])
            pos += len(xs[i])
            prev = c
            cls.append(c)
        x = np.concatenate(parts)
        out.append({"name": f"{prefix}-{s:02d}", "n": int(len(x)), "channels": int(x.shape[1]),
                    "values": np.round(x, 6).tolist(), "annotations": {"truth": truth},
                    "classes": cls})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aeon-data", default=None, help="aeon's datasets/data folder")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    data = Path(args.aeon_data) if args.aeon_data else _default_data_dir()
    if data is None or not data.is_dir():
        raise SystemExit("build_mts_dev: aeon's data folder not found: make ClaSS's peer venv "
                         "(python -c 'import peer_env; peer_env.ensure_venv()' in "
                         "benchmarks/peers) or pass --aeon-data")
    series = []
    for name, count, seg, seed in (("BasicMotions", 10, (4, 6), 4801),
                                   ("JapaneseVowels", 10, (12, 20), 4802)):
        xs, ys = [], []
        for part in ("TRAIN", "TEST"):
            a, b = read_ts(data / name / f"{name}_{part}.ts")
            xs += a
            ys += b
        series += build(xs, ys, count, seg, seed, name.lower())
    doc = {"provenance": {
        "built_by": "benchmarks/build_mts_dev.py",
        "sources": {"BasicMotions": "UEA multivariate archive, shipped in aeon 1.6 "
                    "(aeon/datasets/data/BasicMotions), 6 channels, 4 activities",
                    "JapaneseVowels": "UCI Japanese Vowels (CC BY 4.0; Kudo, Toyama & "
                    "Shimbo 1999), shipped in aeon 1.6, 12 channels, 9 speakers"},
        "rule": "per series: 4-6 (BasicMotions) or 12-20 (JapaneseVowels) recordings of "
                "alternating classes, concatenated; truth = the boundaries",
        "purpose": "development data (for choosing), issue 48 item 3"},
        "series": series}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, separators=(",", ":")))
    print(f"wrote {args.out}: {len(series)} series, "
          f"{sum(s['n'] for s in series):,} records")


if __name__ == "__main__":
    main()
