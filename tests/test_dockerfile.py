"""The Dockerfile's install, reproduced without a Docker daemon: its build context rebuilt from
``.dockerignore`` and its COPY lines, its pip lines run, and every operator created and the
example pipeline's operators run from what it installed. The Kubernetes and Compose files name
the image's command and the probes the README and the docs pages document."""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

import pytest
import yaml
from test_wheel import (
    check_installed_operators,
    run_example_pipeline_operators,
    source_modules,
)

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments out."""
    out, buf = [], ""
    for line in text.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def ignored(rel: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule (the subset this project uses): a pattern matches the path
    or one of its parents; ``**/`` matches at any depth."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for pat in patterns:
        pat = pat.rstrip("/")
        for prefix in prefixes:
            if fnmatch.fnmatch(prefix, pat) or (pat.startswith("**/") and
                                                fnmatch.fnmatch(prefix.split("/")[-1], pat[3:])):
                return True
    return False


def build_context(dest: Path) -> Path:
    """The files ``docker build .`` would send from the repository: what git tracks (a
    clean checkout) less what ``.dockerignore`` names."""
    patterns = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
                if ln.strip() and not ln.lstrip().startswith("#")]
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for rel in tracked.splitlines():
        if ignored(rel, patterns) or not (ROOT / rel).is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)
    return dest


class Stage:
    def __init__(self, root: Path):
        self.root = root
        self.workdir = "/"

    def path(self, p: str) -> Path:
        p = p if p.startswith("/") else f"{self.workdir.rstrip('/')}/{p}"
        return self.root / p.lstrip("/")


def copy(src: Path, dst: Path, dst_is_dir: bool) -> None:
    if src.is_dir():
        shutil.copytree(src, dst, dirs_exist_ok=True)
    else:
        target = dst / src.name if dst_is_dir else dst
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def reproduce(tmp: Path) -> dict:
    """Follow the Dockerfile: each stage a folder, COPY from the context or an earlier stage,
    RUN's pip commands with the stage's absolute paths mapped into its folder (the wheel built
    offline: ``--no-build-isolation``; the install into a venv that sees the host's
    dependencies). Returns what the final stage installed."""
    context = build_context(tmp / "context")
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    env_dir = tmp / "venv"
    cmd = entrypoint = user = None
    env: dict[str, str] = {}
    chowns: list[tuple[int, Path]] = []
    for word, args in instructions(DOCKERFILE.read_text()):
        if word == "FROM":
            m = re.match(r"\S+(?:\s+AS\s+(\S+))?", args, re.I)
            current = Stage(tmp / f"stage{len(stages)}")
            stages[m.group(1) or str(len(stages))] = current
            env, user = {}, None
        elif word == "ENV":  # KEY=VALUE ...; an absolute path is mapped into the stage
            for item in shlex.split(args):
                k, _, v = item.partition("=")
                env[k] = str(current.path(v)) if v.startswith("/") else v
        elif word == "USER":
            user = int(args)
        elif word == "WORKDIR":
            current.workdir = args
            current.path(".").mkdir(parents=True, exist_ok=True)
        elif word == "COPY":
            parts = shlex.split(args)
            src_root = context
            if parts[0].startswith("--from="):
                src_stage = stages[parts.pop(0).split("=", 1)[1]]
                src_root = None
            *srcs, dst = parts
            for s in srcs:
                src = src_stage.path(s) if src_root is None else src_root / s
                copy(src, current.path(dst), dst.endswith("/") or dst in (".", "./")
                     or len(srcs) > 1)
        elif word == "RUN":
            for command in args.split("&&"):
                argv = shlex.split(command)
                if argv[:2] == ["mkdir", "-p"]:
                    for d in argv[2:]:
                        current.path(d).mkdir(parents=True, exist_ok=True)
                    continue
                if argv and argv[0] == "chown":  # done as the image's user, when we can
                    chowns += [(int(argv[1]), current.path(d)) for d in argv[2:]]
                    continue
                if not argv or argv[0] != "pip":
                    continue  # useradd, rm: nothing the install depends on
                argv = [str(current.path(a)) if a.startswith("/") else a for a in argv]
                argv = [m for a in argv for m in (sorted(glob.glob(a)) or [a])]
                if argv[1] == "wheel":
                    argv.insert(2, "--no-build-isolation")
                else:
                    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
                    argv[2:2] = ["--prefix", str(env_dir), "--no-warn-script-location",
                                 "--ignore-installed", "--no-deps"]
                r = subprocess.run([sys.executable, "-m", *argv], cwd=current.path("."),
                                   capture_output=True, text=True)
                assert r.returncode == 0, f"{command}: {r.stderr[-2000:]}"
        elif word == "CMD":
            cmd = yaml.safe_load(args)
        elif word == "ENTRYPOINT":
            entrypoint = yaml.safe_load(args)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print("
                                "sysconfig.get_paths()['purelib'])"], check=True,
                               capture_output=True, text=True).stdout.strip())
    return {"context": context, "final": current, "venv": env_dir, "python": python,
            "site": site, "cmd": cmd, "entrypoint": entrypoint, "env": env, "user": user,
            "chowns": chowns}


def as_the_image_user(got: dict, tmp: Path) -> tuple[list[str], dict[str, str]]:
    """Run as the final stage's USER (by ``setpriv``, when the tests run as root, as CI does)
    with its ENV and a HOME that does not exist (``useradd --no-create-home``); otherwise as
    the current user with that ENV and HOME."""
    env = {**os.environ, **got["env"], "HOME": str(tmp / "no-home")}
    if got["user"] is None or os.geteuid() != 0 or not shutil.which("setpriv"):
        return [], env
    for uid, path in got["chowns"]:
        os.chown(path, uid, -1)
    u = got["user"]
    who = ["setpriv", f"--reuid={u}", f"--regid={u}", "--clear-groups"]
    # The venv's python is a copy that finds its standard library and the host's packages
    # under the interpreter's prefix: the image's user must be able to reach it (a pyenv
    # interpreter under a 0700 /root is not; .ci/run makes its folders traversable).
    probe = subprocess.run([*who, str(got["python"]), "-c", "import sys, numpy; print(sys.prefix)"],
                           env=env, capture_output=True, text=True, cwd=tmp)
    if probe.returncode != 0:
        why = (f"user {u} cannot import the host's packages through {sys.base_prefix} "
               f"(a folder on its path is not traversable by others?): "
               f"{probe.stderr.strip().splitlines()[-1:] or probe.returncode}")
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return who, env


def test_the_dockerfile_install_holds_every_module_and_runs_every_operator():
    # pytest's tmp_path is its owner's alone (0700); the image's user must reach the install
    tmp = Path(tempfile.mkdtemp(prefix="shiftwatch-image-"))
    try:
        tmp.chmod(0o755)
        _install_and_run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _install_and_run(tmp: Path) -> None:
    got = reproduce(tmp)
    site = got["site"]
    installed = {p.relative_to(site).as_posix() for p in (site / "shiftwatch").rglob("*.py")}
    missing = sorted(source_modules() - installed)
    assert not missing, f"the image's install lacks {missing}"
    # the image runs as its USER, who can write neither root's site-packages nor a home,
    # where Numba caches the kernels by default (it then refuses to import them)
    assert got["user"] is not None
    who = as_the_image_user(got, tmp)
    cwd = tmp / "elsewhere"
    cwd.mkdir()
    if who[0]:
        os.chown(cwd, got["user"], -1)
    check_installed_operators(got["python"], got["venv"], cwd, who)
    report = run_example_pipeline_operators(got["venv"], site, cwd / "run", who)
    assert report["summary"]["records"] > 0
    # the default command names a pipeline file the image holds
    assert got["entrypoint"] == ["shiftwatch"]
    assert got["cmd"][0] == "run" and got["final"].path(got["cmd"][1]).is_file(), got["cmd"]


def test_the_build_context_leaves_out_what_is_not_the_project(tmp_path):
    context = build_context(tmp_path / "c")
    assert (context / "operators" / "shape" / "operator.py").is_file()
    assert (context / "pyproject.toml").is_file() and (context / "setup.py").is_file()
    assert not (context / "tests").exists() and not (context / ".git").exists()
    assert not list(context.rglob("__pycache__"))


def test_the_ignore_rule():
    assert ignored("tests/test_x.py", ["tests"])
    assert ignored("operators/__pycache__/a.pyc", ["**/__pycache__"])
    assert not ignored("operators/shape/operator.py", ["tests", "**/__pycache__", ".git"])


def _stage_commands() -> dict[str, list[str]]:
    """The ``shiftwatch`` arguments each Compose service and Kubernetes container runs."""
    compose = yaml.safe_load((ROOT / "deploy" / "docker" / "docker-compose.yml").read_text())
    out = {f"compose:{name}": svc["command"] for name, svc in compose["services"].items()
           if svc.get("image", "").startswith("shiftwatch")}
    for doc in yaml.safe_load_all((ROOT / "deploy" / "k8s" / "detect-stage.yaml").read_text()):
        if doc and doc.get("kind") == "Deployment":
            for c in doc["spec"]["template"]["spec"]["containers"]:
                out[f"k8s:{c['name']}"] = c["args"]
    return out


def test_compose_and_kubernetes_run_the_command_and_probes_the_readme_names():
    # the README and the docs pages it links to (the operations page holds the probes)
    readme = "\n".join(p.read_text() for p in [ROOT / "README.md",
                                              *sorted((ROOT / "docs").rglob("*.md"))])
    commands = _stage_commands()
    assert commands
    for where, argv in commands.items():
        assert argv[0] == "run" and "--stage" in argv, where
        assert argv[argv.index("--metrics-port") + 1] == "9400", where
        assert "shiftwatch run pipeline.yaml --metrics-port 9400" in readme
    compose = yaml.safe_load((ROOT / "deploy" / "docker" / "docker-compose.yml").read_text())
    for name, svc in compose["services"].items():
        if svc.get("image", "").startswith("shiftwatch"):
            assert "/healthz" in " ".join(svc["healthcheck"]["test"]), name
    k8s = [d for d in yaml.safe_load_all((ROOT / "deploy" / "k8s" /
                                          "detect-stage.yaml").read_text()) if d]
    container = k8s[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "/healthz" in readme and "/readyz" in readme
