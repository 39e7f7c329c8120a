"""Build hook: a wheel carries the Hydra configs (conf/, experiments/**/*.yaml, sweeps/**/*.yaml) and the study
specs inside the package.

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
            # every config group below them (experiments/arm/, study_env/, speed/) and the study specs with their
            # registrations and generated text (experiments/studies/); not the results
            found = [*(ROOT / folder).rglob("*.yaml"), *(ROOT / folder / "studies").glob("*.md")]
            for path in found:
                relative = path.relative_to(ROOT / folder)
                if relative.parts[0] != "results":
                    (target / folder / relative).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target / folder / relative)


setup(cmdclass={"build_py": BuildPyWithConfigs})
