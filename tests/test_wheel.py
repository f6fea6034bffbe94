"""A wheel builds, holds every module of the source tree, installs into a clean venv, imports
as shiftwatch.* with nothing else new at the top level of site-packages, and creates and runs
every registered operator there (what an editable install would hide)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Two tests build a wheel from the repository, which setuptools does in place (ROOT/build,
#: shiftwatch.egg-info): under pytest-xdist (--dist loadgroup) they run one after the other
#: on one worker.
pytestmark = pytest.mark.xdist_group("wheel-from-the-repository")
#: source folder -> where its modules live inside the installed package
FOLDERS = {"shiftwatch": "shiftwatch", "streams": "shiftwatch/streams",
           "operators": "shiftwatch/operators", "sinks": "shiftwatch/sinks",
           "deploy": "shiftwatch/deploy"}


def source_modules(root: Path = ROOT) -> set[str]:
    """Every ``.py`` file of the library's folders, as its path inside the wheel."""
    out = set()
    for folder, inside in FOLDERS.items():
        for path in (root / folder).rglob("*.py"):
            rel = path.relative_to(root / folder)
            if "__pycache__" in rel.parts:
                continue
            out.add(f"{inside}/{rel.as_posix()}")
    return out


def build_wheel(source: Path, dist: Path) -> Path:
    # setuptools builds in <source>/build and packs whatever build/lib holds: start clean so a
    # module deleted from the source tree cannot ride along from an earlier build.
    shutil.rmtree(source / "build", ignore_errors=True)
    try:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(dist), str(source)], check=True, capture_output=True,
                       cwd=dist.parent)
    finally:
        shutil.rmtree(source / "build", ignore_errors=True)
    wheels = list(dist.glob("shiftwatch-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def install_into_venv(wheel: Path, env_dir: Path) -> tuple[Path, Path]:
    """A venv that sees the host's dependencies (system site packages) but none of
    shiftwatch's source; ``wheel`` installed in it. Returns (python, site-packages)."""
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    # The venv has no pip of its own: install with the host's pip into the venv's prefix.
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q",
                    "--prefix", str(env_dir), "--no-warn-script-location",
                    "--ignore-installed", str(wheel)],
                   check=True, capture_output=True, cwd=env_dir.parent)
    return python, site


#: Run in the installed venv: create every registered operator from its first test
#: parameters and run it on its own test stream (learners too when torch imports; with
#: torch blocked, a learner must refuse in one line that names the extra).
CREATE_EVERY_OPERATOR = r"""
import json, sys
block_torch = sys.argv[1] == "block-torch"
if block_torch:  # as if torch were not installed (scipy probes sys.modules for it)
    class NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError("No module named 'torch'")
    sys.meta_path.insert(0, NoTorch())
from shiftwatch.operators import create, registered_names, resolve
out = {}
for name in registered_names():
    cls = resolve(name)
    params = next(iter(cls._unit_test_params()))
    try:
        op = create(name, **params)
        outputs = op.process_batch(cls._test_stream(params, seed=0))
        out[name] = {"ok": True, "outputs": len(outputs), "module": type(op).__module__}
    except ImportError as exc:
        out[name] = {"ok": False, "error": str(exc)}
print(json.dumps(out))
"""

LEARNERS = {"hare-tortoise", "cila"}


#: How to run a command as the image's user: (argv prefix, environment); None runs it as is.
RunAs = tuple[list[str], dict[str, str]] | None


def run_as(argv: list[str], who: RunAs, **kw) -> subprocess.CompletedProcess:
    prefix, env = who if who else ([], None)
    return subprocess.run([*prefix, *argv], env=env, **kw)


def run_every_operator(python: Path, cwd: Path, block_torch: bool, who: RunAs = None) -> dict:
    out = run_as([str(python), "-c", CREATE_EVERY_OPERATOR,
                  "block-torch" if block_torch else "torch"], who,
                 capture_output=True, text=True, cwd=cwd, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def check_installed_operators(python: Path, env_dir: Path, cwd: Path, who: RunAs = None) -> None:
    """Every operator created and run from the installed package (not from the source)."""
    got = run_every_operator(python, cwd, block_torch=False, who=who)
    from shiftwatch.operators import registered_names

    assert set(got) == set(registered_names())
    for name, r in got.items():
        assert r["ok"], f"{name}: {r}"
        # from the installed package, not from the source tree
        assert r["module"].startswith("shiftwatch."), r
    assert sum(r["outputs"] > 0 for r in got.values()) >= len(got) - 1  # embed may burn in
    blocked = run_every_operator(python, cwd, block_torch=True, who=who)
    for name, r in blocked.items():
        if name in LEARNERS:
            assert not r["ok"] and "needs PyTorch" in r["error"] and \
                "shiftwatch[learners]" in r["error"] and "\n" not in r["error"], r
        else:
            assert r["ok"], f"{name} needs torch: {r}"


def run_example_pipeline_operators(env_dir: Path, site: Path, out_dir: Path,
                                   who: RunAs = None) -> dict:
    """The example pipeline's two operators (standardize -> river:ADWIN) replayed by the
    installed console script over the example CSV the wheel ships."""
    shiftwatch = env_dir / "bin" / "shiftwatch"
    examples = site / "shiftwatch" / "deploy" / "examples"
    r = run_as([str(shiftwatch), "replay", str(examples / "sensors.csv"),
                "--source-opt", "key=sensor", "--source-opt", "value=temp",
                "--source-opt", "ts=ts", "--operator", "standardize",
                "--param", "burn_in=30", "--operator", "river:ADWIN",
                "--param", "delta=0.002", "--out", str(out_dir), "--no-plots",
                "--no-progress", "--quiet"], who,
               capture_output=True, text=True, cwd=out_dir.parent, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((out_dir / "report.json").read_text())


def test_the_wheel_holds_every_module_of_the_source_tree(tmp_path):
    wheel = build_wheel(ROOT, tmp_path / "dist")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    missing = sorted(source_modules() - names)
    assert not missing, f"not in the wheel: {missing}"
    for data in ("shiftwatch/deploy/examples/sensors.yaml",
                 "shiftwatch/deploy/examples/sensors.csv",
                 "shiftwatch/deploy/grafana/shiftwatch.json"):
        assert data in names, f"{data} is not in the wheel"


def test_a_module_missing_from_a_package_list_would_be_caught(tmp_path):
    # the check above must be able to fail: a tree with a module the wheel does not hold
    fake = tmp_path / "tree"
    (fake / "operators" / "newfamily").mkdir(parents=True)
    (fake / "operators" / "newfamily" / "thing.py").write_text("")
    for folder in ("shiftwatch", "streams", "sinks", "deploy"):
        (fake / folder).mkdir()
    assert "shiftwatch/operators/newfamily/thing.py" in source_modules(fake)


def test_wheel_installs_only_shiftwatch_and_runs_every_operator_from_the_venv(tmp_path):
    wheel = build_wheel(ROOT, tmp_path / "dist")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    site_before = Path(subprocess.run(
        [str(env_dir / "bin" / "python"), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    before = set(p.name for p in site_before.iterdir()) if site_before.exists() else set()
    python, site = install_into_venv(wheel, env_dir)
    new = {p for p in {p.name for p in site.iterdir()} - before if p != "__pycache__"}
    assert "shiftwatch" in new
    extra = {p for p in new if p != "shiftwatch" and not
             (p.startswith("shiftwatch-") and p.endswith(".dist-info"))}
    assert not extra, f"the wheel put {sorted(extra)} at the top of site-packages"
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    out = subprocess.run(
        [str(python), "-c", "import shiftwatch, shiftwatch.operators.shape.operator as m; "
         "print(shiftwatch.__file__); print(m.__file__)"],
        check=True, capture_output=True, text=True, cwd=cwd).stdout.splitlines()
    for path in out:
        assert Path(path).resolve().is_relative_to(env_dir.resolve()), path
    check_installed_operators(python, env_dir, cwd)
    report = run_example_pipeline_operators(env_dir, site, cwd / "run")
    assert report["summary"]["records"] > 0
    assert sysconfig.get_paths()["purelib"] != str(site)
