"""Package discovery for the layout: the four folders at the top of the repository install as
``shiftwatch.streams``, ``shiftwatch.operators``, ``shiftwatch.sinks`` and ``shiftwatch.deploy``
beside the ``shiftwatch/`` ground floor. Every package under them is found here, not listed by
hand, so a new folder cannot be left out of the wheel (``tests/test_wheel.py`` checks that
every module of the tree is in it). Everything else is in ``pyproject.toml``.
"""

from setuptools import find_packages, setup

#: folder -> the import name it installs as
FOLDERS = {"shiftwatch": "shiftwatch", "streams": "shiftwatch.streams",
           "operators": "shiftwatch.operators", "sinks": "shiftwatch.sinks",
           "deploy": "shiftwatch.deploy"}

packages = []
for folder, name in FOLDERS.items():
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir={name: folder for folder, name in FOLDERS.items()})
