"""Packaging hook (the project's metadata is in pyproject.toml): the wheel also carries the bundled probe
suites (probes/), copied in as package data under drifttool/_probes, so `pip install drifttool` has `drifttool
demo`. An editable install reads them from the checkout instead. (The dashboard is the drifttool.dashboard
package, in the wheel as any other module.)"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
DATA_DIRS = {"probes": "_probes"}


class BuildPy(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for src, dst in DATA_DIRS.items():
            out = Path(self.build_lib) / "drifttool" / dst
            shutil.rmtree(out, ignore_errors=True)
            shutil.copytree(ROOT / src, out, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"))


setup(cmdclass={"build_py": BuildPy})
