"""experiments/offline/wheelhouse.py (``make wheelhouse``), the wheels of an offline node: reading a node's
``pip freeze``, the closure it carries (stopping at what the node has, markers for the node's Python), the
folder's checks; and, end to end (slow, needs the index), a wheelhouse for this machine's Python installed into
a fresh venv with the index switched off, beside a stand-in for the node's image."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from experiment_scripts import load_script
from packaging.requirements import Requirement

wheelhouse = load_script("offline/wheelhouse.py")
ENV312 = wheelhouse.target_env("3.12")


def test_a_freeze_gives_names_and_versions_local_labels_kept_for_checks_dropped_for_pins():
    node = wheelhouse.read_node(
        "# a comment\nTorch==2.11.0+cu130\nPyYAML==6.0.2  # trailing\nsome_pkg @ file:///build/some_pkg.whl\n"
        "-e git+https://example.org/x.git@abc#egg=My_Tool\n--index-url https://example.org\nrich\nodd==not.a.version\n"
    )
    assert node == {
        "torch": "2.11.0+cu130",
        "pyyaml": "6.0.2",
        "some-pkg": None,
        "my-tool": None,
        "rich": None,
        "odd": None,
    }
    assert wheelhouse.constraints(node) == ["pyyaml==6.0.2", "torch==2.11.0"]


def test_the_default_node_is_the_h200_image_without_what_the_lab_must_carry():
    node = wheelhouse.read_node(wheelhouse.DEFAULT_NODE.read_text())
    assert {"torch", "lightning", "transformers", "numpy", "pandas", "scipy", "matplotlib", "pyyaml"} <= set(
        node
    )
    assert node["torch"] == "2.11.0"
    lacks = {
        "hydra-core",
        "omegaconf",
        "antlr4-python3-runtime",
        "hydra-joblib-launcher",
        "gymnasium",
        "mlflow",
    }
    assert not lacks & set(node)


def _item(name: str, version: str, *requires: str) -> dict:
    return {"metadata": {"name": name, "version": version, "requires_dist": list(requires)}}


def test_the_closure_stops_at_the_node_and_reads_markers_for_the_target_python():
    report = {
        "hydra-core": _item("hydra-core", "1.3.8", "omegaconf<2.4", "packaging"),
        "omegaconf": _item("omegaconf", "2.3.1", "antlr4-python3-runtime==4.9.*", "PyYAML>=5.1"),
        "antlr4-python3-runtime": _item("antlr4-python3-runtime", "4.9.3"),
        "mlflow": _item(
            "mlflow", "3.0", "flask<4", 'backport; python_version < "3.12"', 'extra-dep; extra == "x"'
        ),
        "flask": _item("flask", "3.1", "werkzeug>=3.1", "blinker"),
        "blinker": _item("blinker", "1.9"),
        "backport": _item("backport", "1.0"),
        "extra-dep": _item("extra-dep", "1.0"),
    }
    node = {"packaging": None, "pyyaml": "6.0", "werkzeug": "3.1.3", "torch": "2.11.0"}
    roots = [Requirement(r) for r in ("hydra-core>=1.3", "torch", "mlflow", 'gone; sys_platform == "win32"')]
    via = wheelhouse.closure(roots, report, node, ENV312)
    assert via == {
        "hydra-core": "gigpo-lab",
        "omegaconf": "hydra-core",
        "antlr4-python3-runtime": "omegaconf",
        "mlflow": "gigpo-lab",
        "flask": "mlflow",
        "blinker": "flask",
    }  # no backport on 3.12, no extra unasked, nothing of the node's
    assert "backport" in wheelhouse.closure(roots, report, node, wheelhouse.target_env("3.11"))
    assert "extra-dep" in wheelhouse.closure([Requirement("mlflow[x]")], report, node, ENV312)
    with pytest.raises(SystemExit, match="needed by flask"):
        wheelhouse.closure(
            roots, report, {"packaging": None, "pyyaml": None}, ENV312
        )  # werkzeug: nobody has it


def test_node_conflicts_name_a_version_the_node_has_that_a_requirement_refuses():
    needs = {
        "gigpo-lab": (["torch>=2.4,<2.15", "numpy<3", "rich>=13"], set()),
        "mlflow": (["pandas<3"], set()),
    }
    node = {"torch": "2.16.0+cu130", "numpy": "2.5.2", "rich": None, "pandas": "3.0.1"}
    assert wheelhouse.node_conflicts(needs, node, ENV312) == [
        "gigpo-lab needs torch<2.15,>=2.4, the node has torch 2.16.0+cu130",
        "mlflow needs pandas<3, the node has pandas 3.0.1",
    ]


def test_the_folder_check_finds_two_versions_a_missing_a_wrong_and_a_stray_wheel(tmp_path):
    for name in (
        "a-1.0-py3-none-any.whl",
        "a-2.0-py3-none-any.whl",
        "b-1.0-py3-none-any.whl",
        "c-1.0-py3-none-any.whl",
    ):
        (tmp_path / name).write_bytes(b"")
    problems = wheelhouse.check_folder(tmp_path, {"a": "1.0", "b": "1.1", "d": "1.0"})
    assert problems == [
        "a: 2 wheels (a-1.0-py3-none-any.whl, a-2.0-py3-none-any.whl)",
        "b: 1.0 instead of 1.1",
        "d 1.0: no wheel",
        "c: not in the closure",
    ]
    assert wheelhouse.check_folder(tmp_path, {"a": "1.0", "b": "1.0", "c": "1.0"})[0].startswith(
        "a: 2 wheels"
    )


def test_the_platforms_run_from_the_newest_glibc_down_with_the_legacy_names():
    tags = wheelhouse.platforms("2.28")
    assert (
        tags[0] == "manylinux_2_28_x86_64"
        and "manylinux_2_17_x86_64" in tags
        and tags[-1] == "manylinux1_x86_64"
    )
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64"} <= set(tags) and len(tags) == 27


def _node_image(folder: Path, names: set[str]) -> dict[str, str]:
    """A stand-in for the node's image: this venv's distributions named in ``names`` and what they need here
    (an image is whole: pip checks the needs of what is installed), every file linked into ``folder``, which a
    fresh venv then puts on its path. Returns their versions (the node's freeze)."""
    installed = {}
    for dist in importlib.metadata.distributions():
        installed.setdefault(wheelhouse.canonicalize_name(dist.metadata["Name"]), dist)
    versions = {}
    queue = sorted(names & set(installed))
    while queue:
        name = queue.pop()
        if name in versions:
            continue
        dist = installed[name]
        versions[name] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            sub = wheelhouse.canonicalize_name(req.name)
            if sub in installed and (req.marker is None or req.marker.evaluate({"extra": ""})):
                queue.append(sub)
        for file in dist.files or []:
            if file.parts[0] == ".." or not Path(dist.locate_file(file)).is_file():
                continue
            link = folder / file
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(Path(dist.locate_file(file)).resolve())
    return versions


@pytest.mark.slow
def test_the_wheelhouse_installs_the_lab_into_a_fresh_venv_with_the_index_off(tmp_path):
    """The node: a fresh venv that sees the H200 image's projects as this venv holds them (torch, lightning,
    transformers, numpy, ... linked in) and nothing else. The wheelhouse is built against that node's freeze,
    for this Python; then `pip install --no-index --find-links` (no pip configuration, so no other source),
    and the lab's imports come from the venv, torch from the image; a one-iteration run tracks into sqlite."""
    names = set(wheelhouse.read_node(wheelhouse.DEFAULT_NODE.read_text()))
    image = tmp_path / "image"
    freeze = _node_image(image, names)
    assert {"torch", "lightning", "transformers", "numpy"} <= set(freeze)
    assert not {"hydra-core", "mlflow", "gymnasium", "omegaconf"} & set(freeze)
    (tmp_path / "node-freeze.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(freeze.items())))
    houses = tmp_path / "wheels"
    script = wheelhouse.ROOT / "experiments" / "offline" / "wheelhouse.py"
    subprocess.run(
        [sys.executable, script, "--node-freeze", tmp_path / "node-freeze.txt", "--out", houses],
        check=True,
        timeout=600,
    )
    listed = (houses / "wheelhouse.txt").read_text()
    assert "built here, needed by omegaconf" in listed or "built here, needed by hydra-core" in listed
    assert "node version conflict" not in listed

    venv = tmp_path / "venv"
    # no pip or setuptools of its own: the image's (the node has both; torch needs its setuptools)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "node_image.pth").write_text(f"{image}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    env["PIP_CONFIG_FILE"] = os.devnull  # no find-links, no extra index of this machine
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-index", "--find-links", houses, "gigpo-lab"],
        env=env,
        cwd=tmp_path,
        check=True,
        timeout=600,
    )
    where = subprocess.run(
        [py, "-c", "import json, gigpo_lab, hydra, omegaconf, mlflow, gymnasium, torch; print(json.dumps("
         "{m.__name__: m.__file__ for m in (gigpo_lab, hydra, omegaconf, mlflow, gymnasium, torch)}))"],
        env=env, cwd=tmp_path, capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    files = json.loads(where.stdout.splitlines()[-1])
    assert all(
        files[m].startswith(str(site)) for m in ("gigpo_lab", "hydra", "omegaconf", "mlflow", "gymnasium")
    )
    assert files["torch"].startswith(str(image))
    run = subprocess.run(
        [venv / "bin" / "gigpo-lab", "train", "trainer.iterations=1", "rollout.groups=2", "rollout.group_size=2",
         "rollout.eval_episodes=2", "env.max_turns=4", "lightning.progress_bar=false", "lightning.num_threads=1",
         f"output_dir={tmp_path}/run", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"hydra.run.dir={tmp_path}/hydra"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert (tmp_path / "mlflow.db").stat().st_size > 0
