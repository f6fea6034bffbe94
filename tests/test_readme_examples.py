"""The README's examples run as written: its Python snippets that make files, then every
`shiftwatch replay` / `calibrate` command it shows (the Kafka ones are the integration tests'),
in a scratch directory where the repository's `deploy/` and `benchmarks/` are at hand; a
command shown with its output (`$ shiftwatch ...`) must print that output, numbers included,
but for timings.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

#: Wall times and rates vary from run to run; everything else must match.
_TIMING = [
    (re.compile(r"in \d+(\.\d+)? s \([\d,]+/s\)"), "in T s (R/s)"),
    (re.compile(r"\d+(\.\d+)? s\b"), "T s"),
]


def _blocks() -> list[tuple[str, str]]:
    """(language, text) of every fenced block, in order."""
    return [(m.group(1), m.group(2)) for m in
            re.finditer(r"^```(\w*)\n(.*?)^```", README, re.S | re.M)]


def _commands(text: str) -> list[tuple[str, list[str] | None]]:
    """The commands of a block (continuations joined) and, for `$ cmd` lines, the output
    lines shown after them."""
    lines = text.splitlines()
    out: list[tuple[str, list[str] | None]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        shown = line.startswith("$ ")
        cmd = line[2:] if shown else line
        if not re.match(r"(shiftwatch (replay|calibrate) |python benchmarks/)", cmd):
            i += 1
            continue
        while cmd.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd = cmd.rstrip()[:-1] + " " + lines[i].strip()
        cmd = re.sub(r"\s+#.*$", "", cmd)
        expected = None
        if shown:
            expected = []
            while i + 1 < len(lines) and not lines[i + 1].startswith("$ "):
                i += 1
                expected.append(lines[i])
        out.append((cmd, expected))
        i += 1
    return out


def _examples() -> list[tuple[str, str, list[str] | None]]:
    """('python', code, None) and ('command', cmd, expected) in README order."""
    out = []
    for lang, text in _blocks():
        if lang in ("py", "python"):
            out.append(("python", text, None))
        elif lang in ("bash", "text"):
            for cmd, expected in _commands(text):
                if "kafka:" in cmd or "SOURCE" in cmd or "[" in cmd.split()[1]:
                    continue
                out.append(("command", cmd, expected))
    return out


def _normal(text: str) -> list[str]:
    lines = [ln.rstrip() for ln in text.strip().splitlines()]
    for pat, rep in _TIMING:
        lines = [pat.sub(rep, ln) for ln in lines]
    return lines


#: Snippets that need what is not in a fresh clone's scratch directory (a broker, torch
#: factories defined elsewhere) and the reason.
_SKIP_PYTHON = ("KafkaProducer", "from shiftwatch import EvaluationSink")


def test_the_readme_has_examples_to_run():
    kinds = [k for k, _, _ in _examples()]
    assert kinds.count("command") >= 8 and kinds.count("python") >= 3


def test_every_readme_example_runs_verbatim(tmp_path):
    for name in ("deploy", "benchmarks"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = {**os.environ, "MPLBACKEND": "Agg"}
    failures = []
    examples = _examples()
    # The README shows some outputs before the snippet that made their input ("The log was
    # made with:"): snippets run first, and one that needs a command's files runs again
    # after the commands.
    snippets = [text for kind, text, _ in examples
                if kind == "python" and not any(s in text for s in _SKIP_PYTHON)]

    def run_python(text: str):
        return subprocess.run([sys.executable, "-c", text], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)

    later = [text for text in snippets if run_python(text).returncode]
    for kind, text, expected in examples:
        if kind == "python":
            continue
        argv = shlex.split(text)
        if argv[0] == "shiftwatch":
            argv = [sys.executable, "-m", "shiftwatch.deploy.cli", *argv[1:]]
        elif argv[0] == "python":
            argv = [sys.executable, *argv[1:]]
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        if proc.returncode:
            failures.append(f"{text}\nexit {proc.returncode}\n{proc.stderr[-2000:]}")
            continue
        if expected is not None:
            shown, got = _normal("\n".join(expected)), _normal(proc.stdout)
            if shown != got:
                failures.append(f"{text}\nREADME shows:\n" + "\n".join(shown)
                                + "\nit prints:\n" + "\n".join(got))
    for text in later:
        proc = run_python(text)
        if proc.returncode:
            failures.append(f"python snippet:\n{text}\n{proc.stderr[-2000:]}")
    assert not failures, "\n\n".join(failures)


def test_every_readme_pipeline_parses(monkeypatch):
    # The README's YAML blocks that are whole pipelines (a `stages:` list) load as pipelines
    # (YAML and the settings both: a flow mapping with "{stage}" in it must be quoted).
    import re

    import yaml

    from shiftwatch.deploy.pipeline import parse_pipeline

    blocks = re.findall(r"^```yaml\n(.*?)^```", README, re.S | re.M)
    pipelines = [b for b in blocks if re.search(r"^stages:", b, re.M)]
    assert pipelines
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "localhost:9092")
    for text in pipelines:
        parse_pipeline(yaml.safe_load(text), build_operators=False)
