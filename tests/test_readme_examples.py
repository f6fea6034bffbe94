"""The documentation's examples run as written: README.md, then every page of the docs site in
the order of its nav (`mkdocs.yml`; pages it includes with `--8<--` read in place), so an
example moved from one page to another stays tested. Python snippets that make files run,
then every `shiftwatch replay` / `calibrate` command shown (the Kafka ones are the integration
tests'), in a scratch directory where the repository's `deploy/` and `benchmarks/` are at hand;
a command shown with its output (`$ shiftwatch ...`) must print that output, numbers included,
but for timings; so must every `$ shiftwatch ... --help` (at 80 columns). An example shown on
two pages runs once.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

#: Wall times and rates vary from run to run; everything else must match.
_TIMING = [
    (re.compile(r"in \d+(\.\d+)? s \([\d,]+/s\)"), "in T s (R/s)"),
    (re.compile(r"\d+(\.\d+)? s\b"), "T s"),
]

#: The commands whose examples run (with their shown output, when shown).
_RUNS = re.compile(r"shiftwatch (replay|calibrate) |python benchmarks/"
                   r"|shiftwatch( [a-z]+)? --help$")


def _nav_pages(nav) -> list[str]:
    out: list[str] = []
    for item in nav:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            for value in item.values():
                out += _nav_pages(value) if isinstance(value, list) else [value]
    return out


def doc_pages() -> list[Path]:
    """README.md, then the docs pages in nav order, then any page the nav misses."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    docs = ROOT / config.get("docs_dir", "docs")
    pages = [docs / p for p in _nav_pages(config["nav"])]
    rest = sorted(p for p in docs.rglob("*.md") if p not in pages)
    return [ROOT / "README.md", *pages, *rest]


def page_text(path: Path) -> str:
    """A page as the site renders it: `--8<-- "FILE"` lines replaced by the file."""
    return re.sub(r'^--8<-- "([^"]+)"$', lambda m: (ROOT / m.group(1)).read_text(),
                  path.read_text(), flags=re.M)


def _blocks(text: str) -> list[tuple[str, str]]:
    """(language, text) of every fenced block, in order."""
    return [(m.group(1), m.group(2)) for m in
            re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


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
        if not _RUNS.match(cmd):
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


def _examples(pages: list[Path] | None = None) -> list[tuple[str, str, list[str] | None]]:
    """('python', code, None) and ('command', cmd, expected) in page order, each once."""
    out, seen = [], set()
    for page in doc_pages() if pages is None else pages:
        for lang, text in _blocks(page_text(page)):
            found = []
            if lang in ("py", "python"):
                found.append(("python", text, None))
            elif lang in ("bash", "text"):
                for cmd, expected in _commands(text):
                    if "kafka:" in cmd or "SOURCE" in cmd or "[" in cmd.split()[1]:
                        continue
                    found.append(("command", cmd, expected))
            for example in found:
                key = (example[0], example[1], tuple(example[2] or ()))
                if key not in seen:
                    seen.add(key)
                    out.append(example)
    # a command shown without its output on one page and with it on another runs once
    shown = {text for kind, text, expected in out if kind == "command" and expected is not None}
    return [e for e in out if not (e[0] == "command" and e[2] is None and e[1] in shown)]


def _normal(text: str) -> list[str]:
    lines = [ln.rstrip() for ln in text.strip().splitlines()]
    for pat, rep in _TIMING:
        lines = [pat.sub(rep, ln) for ln in lines]
    return lines


#: Snippets that need what is not in a fresh clone's scratch directory (a broker, torch
#: factories defined elsewhere) and the reason.
_SKIP_PYTHON = ("KafkaProducer", "from shiftwatch import EvaluationSink")


def test_the_docs_have_examples_to_run():
    kinds = [k for k, _, _ in _examples()]
    assert kinds.count("command") >= 18 and kinds.count("python") >= 3
    # the README's quickstart: a replay shown with its output, and a Python snippet
    readme = _examples([ROOT / "README.md"])
    assert any(k == "command" and shown for k, _, shown in readme)
    assert any(k == "python" for k, _, _ in readme)


def test_every_doc_example_runs_verbatim(tmp_path):
    for name in ("deploy", "benchmarks"):
        (tmp_path / name).symlink_to(ROOT / name)
    # argparse wraps --help at the terminal's width: the pages show it at 80 columns
    env = {**os.environ, "MPLBACKEND": "Agg", "COLUMNS": "80"}
    failures = []
    examples = _examples()
    # The pages show some outputs before the snippet that made their input ("The log was
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
                failures.append(f"{text}\nthe docs show:\n" + "\n".join(shown)
                                + "\nit prints:\n" + "\n".join(got))
    for text in later:
        proc = run_python(text)
        if proc.returncode:
            failures.append(f"python snippet:\n{text}\n{proc.stderr[-2000:]}")
    assert not failures, "\n\n".join(failures)


def test_every_doc_pipeline_parses(monkeypatch):
    # The YAML blocks of README.md and the docs that are whole pipelines (a `stages:` list)
    # load as pipelines (YAML and the settings both: a flow mapping with "{stage}" in it
    # must be quoted).
    from shiftwatch.deploy.pipeline import parse_pipeline

    pipelines = [text for page in doc_pages() for lang, text in _blocks(page_text(page))
                 if lang == "yaml" and re.search(r"^stages:", text, re.M)]
    assert pipelines
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "localhost:9092")
    for text in pipelines:
        parse_pipeline(yaml.safe_load(text), build_operators=False)
