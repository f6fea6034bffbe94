"""A wheel builds, installs into a clean venv and imports as shiftwatch.* with nothing else
new at the top level of site-packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_installs_only_shiftwatch_and_imports_from_the_venv(tmp_path):
    # setuptools builds in ROOT/build and packs whatever build/lib holds: start clean so a
    # module deleted from the source tree cannot ride along from an earlier build.
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(dist), str(ROOT)], check=True, capture_output=True,
                   cwd=tmp_path)
    wheels = list(dist.glob("shiftwatch-*.whl"))
    assert len(wheels) == 1
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    before = set(p.name for p in site.iterdir()) if site.exists() else set()
    # The venv has no pip of its own: install with the host's pip into the venv's prefix.
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q",
                    "--prefix", str(env_dir), "--no-warn-script-location",
                    "--ignore-installed", str(wheels[0])],
                   check=True, capture_output=True, cwd=tmp_path)
    new = {p for p in {p.name for p in site.iterdir()} - before if p != "__pycache__"}
    assert "shiftwatch" in new
    extra = {p for p in new if p != "shiftwatch" and not
             (p.startswith("shiftwatch-") and p.endswith(".dist-info"))}
    assert not extra, f"the wheel put {sorted(extra)} at the top of site-packages"
    assert sorted((site / "shiftwatch").iterdir()) and {
        p.name for p in (site / "shiftwatch").iterdir() if p.is_dir()} >= {
        "operators", "streams", "sinks", "deploy"}
    # Data files the commands read at run time ship inside the package.
    for data in ("deploy/examples/sensors.yaml", "deploy/examples/sensors.csv",
                 "deploy/grafana/shiftwatch.json"):
        assert (site / "shiftwatch" / data).is_file(), f"{data} is not in the wheel"
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    out = subprocess.run(
        [str(python), "-c", "import shiftwatch, shiftwatch.operators, shiftwatch.deploy.cli; "
         "print(shiftwatch.__file__); print(shiftwatch.operators.create('standardize'))"],
        check=True, capture_output=True, text=True, cwd=cwd).stdout.splitlines()
    assert Path(out[0]).resolve().is_relative_to(env_dir.resolve()), out[0]
    assert out[1].startswith("Standardize(")
    assert sysconfig.get_paths()["purelib"] != str(site)
    shutil.rmtree(ROOT / "build", ignore_errors=True)
