"""Build hook: a wheel carries the Hydra configs (conf/, experiments/*.yaml, sweeps/*.yaml) inside the package.

Everything else about the package is in pyproject.toml. At run time ``gigpo_lab.config_paths`` finds the
configs in the source checkout (editable installs) or in ``gigpo_lab/_configs`` (wheels).
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithConfigs(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "gigpo_lab" / "_configs"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(ROOT / "conf", target / "conf")
        for folder in ("experiments", "sweeps"):
            (target / folder).mkdir(parents=True, exist_ok=True)
            for yaml_file in (ROOT / folder).glob("*.yaml"):
                shutil.copy2(yaml_file, target / folder / yaml_file.name)


setup(cmdclass={"build_py": BuildPyWithConfigs})
