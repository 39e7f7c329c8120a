"""A folder of wheels for an offline node: what the lab needs and the node lacks, for the node's Python.

    make wheelhouse PYTHON_VERSION=3.12                                # the H200 node's image (h200_node.txt)
    make wheelhouse PYTHON_VERSION=3.12 NODE_FREEZE=node-freeze.txt WHEELHOUSE=.whl
    python experiments/offline/wheelhouse.py --python-version 3.12 --node-freeze node-freeze.txt --out wheelhouse

On the node, with no network (docs/GPU.md):

    pip install --no-index --find-links wheelhouse gigpo-lab      # into the node's venv, when it is writable
    pip install --no-index --no-deps --target /tmp/site wheelhouse/*.whl && export PYTHONPATH=/tmp/site

What it does, on a machine with the index (the network):
1. builds the lab's wheel (its Hydra configs inside, setup.py) from a clean copy of the tree;
2. resolves the lab's requirements that the node lacks for the target (``pip install --dry-run --report``,
   wheels for the target's Python and manylinux tags only; metadata only, nothing is downloaded), with the
   node's pinned versions as constraints, so that what is picked works with what the node has;
3. walks that closure from those requirements, markers evaluated for the target Python, and stops at every
   package the node has (its own needs are the node's);
4. downloads the closure's wheels for the target (``pip download --no-deps --only-binary=:all:``); a project
   with no wheel on the index (``--build``: antlr4-python3-runtime, which hydra-core and omegaconf pin to
   4.9.*) is built here with ``pip wheel`` and must come out pure Python;
5. checks the folder (one version per project, every project of the closure) and replaces the folder's old
   wheels; ``wheelhouse.txt`` there lists each wheel, its size and what needs it.

The node is a ``pip freeze`` of it (``--node-freeze``); by default ``h200_node.txt`` beside this script.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_NODE = Path(__file__).resolve().parent / "h200_node.txt"
LAB = "gigpo-lab"
#: Projects with no wheel on the index, built here: hydra-core 1.3 and omegaconf 2.3 pin antlr4 4.9.*.
BUILD_HERE = ("antlr4-python3-runtime",)


def read_node(text: str) -> dict[str, str | None]:
    """What a node has, from its ``pip freeze`` (or a list of names): canonical name -> version, or None
    where the version is unknown (a bare name, ``name @ url``, an editable ``-e ...#egg=name``)."""
    node: dict[str, str | None] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith("-e") else raw.strip()
        if not line or (line.startswith("-") and not line.startswith("-e")):
            continue
        if line.startswith("-e"):
            if "#egg=" in line:
                node[canonicalize_name(line.split("#egg=", 1)[1].split("&")[0])] = None
            continue
        name, sep, version = line.partition("==")
        name = name.split("@", 1)[0].split("[", 1)[0].strip()
        try:
            node[canonicalize_name(name)] = str(Version(version.strip().lstrip("="))) if sep else None
        except InvalidVersion:
            node[canonicalize_name(name)] = None
    return node


def constraints(node: dict[str, str | None]) -> list[str]:
    """The node's known versions as pip constraints, local labels dropped (``2.11.0+cu130`` -> ``2.11.0``)."""
    return [f"{name}=={Version(v).public}" for name, v in sorted(node.items()) if v]


def target_env(python_version: str) -> dict[str, str]:
    """The marker environment of CPython ``python_version`` on x86_64 Linux."""
    full = python_version if python_version.count(".") == 2 else f"{python_version}.0"
    return {
        "implementation_name": "cpython",
        "implementation_version": full,
        "os_name": "posix",
        "platform_machine": "x86_64",
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": full,
        "python_version": ".".join(python_version.split(".")[:2]),
        "sys_platform": "linux",
    }


def applies(req: Requirement, env: dict[str, str], extras: set[str] | frozenset[str] = frozenset()) -> bool:
    """Whether ``req`` holds in ``env`` for a package installed with ``extras``."""
    return req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in {"", *extras})


def platforms(glibc: str) -> list[str]:
    """pip's ``--platform`` values for x86_64 manylinux up to ``glibc`` (pip matches each tag exactly)."""
    top = int(glibc.split(".")[1])
    tags = [f"manylinux_2_{n}_x86_64" for n in range(top, 4, -1)]
    legacy = {17: "manylinux2014_x86_64", 12: "manylinux2010_x86_64", 5: "manylinux1_x86_64"}
    return tags + [tag for n, tag in legacy.items() if n <= top]


def closure(
    roots: list[Requirement], report: dict[str, dict], node: dict[str, str | None], env: dict[str, str]
) -> dict[str, str]:
    """The projects to carry, name -> what needs it: reachable from ``roots`` through ``report``'s metadata
    (``pip install --report``'s items by canonical name), never through a project the node has."""
    via: dict[str, str] = {}
    extras_of: dict[str, set[str]] = {}
    unresolved: list[str] = []
    queue = [(r, LAB) for r in roots if applies(r, env)]
    while queue:
        req, parent = queue.pop(0)
        name = canonicalize_name(req.name)
        if name in node:
            continue
        if name not in report:
            unresolved.append(f"{req} (needed by {parent})")
            continue
        if name in extras_of and set(req.extras) <= extras_of[name]:
            continue
        via.setdefault(name, parent)
        extras_of[name] = extras_of.get(name, set()) | set(req.extras)
        for text in report[name]["metadata"].get("requires_dist") or []:
            sub = Requirement(text)
            if applies(sub, env, extras_of[name]):
                queue.append((sub, name))
    if unresolved:
        raise SystemExit(
            "pip's resolution lacks what the target Python needs (pip evaluates markers for the Python it runs "
            "on; run this script with the target's Python): " + "; ".join(sorted(set(unresolved)))
        )
    return via


def node_conflicts(
    needs: dict[str, tuple[list[str], set[str]]], node: dict[str, str | None], env: dict[str, str]
) -> list[str]:
    """Requirements on a project the node has, at a known version, that this version does not meet.
    ``needs``: who -> (its Requires-Dist, the extras it is installed with)."""
    out = []
    for who, (requires, extras) in sorted(needs.items()):
        for text in requires:
            req = Requirement(text)
            have = node.get(canonicalize_name(req.name))
            if have and applies(req, env, extras) and not req.specifier.contains(have, prereleases=True):
                out.append(f"{who} needs {req}, the node has {req.name} {have}")
    return out


def wheel_projects(folder: Path) -> dict[str, list[tuple[str, str]]]:
    """canonical name -> [(version, file name)] of the wheels in ``folder``."""
    found: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(folder.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(path.name)
        found.setdefault(name, []).append((str(version), path.name))
    return found


def check_folder(folder: Path, expected: dict[str, str]) -> list[str]:
    """What is wrong with ``folder`` against ``expected`` (name -> version): a project twice (two versions stop
    a whole ``--no-deps`` install), missing, at another version, or not expected."""
    found = wheel_projects(folder)
    problems = [
        f"{n}: {len(v)} wheels ({', '.join(f for _, f in v)})" for n, v in found.items() if len(v) > 1
    ]
    for name, version in sorted(expected.items()):
        if name not in found:
            problems.append(f"{name} {version}: no wheel")
        elif all(Version(v) != Version(version) for v, _ in found[name]):
            problems.append(f"{name}: {found[name][0][0]} instead of {version}")
    problems += [f"{name}: not in the closure" for name in sorted(set(found) - set(expected))]
    return problems


def requires_dist(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        lines = zf.read(meta).decode().split("\n\n", 1)[0].splitlines()
    return [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]


def pip(*args: str) -> None:
    print("+ pip", " ".join(a if len(a) < 80 else a[:77] + "..." for a in args), flush=True)
    if subprocess.run([sys.executable, "-m", "pip", *args], check=False).returncode:
        raise SystemExit(
            f"pip {args[0]} failed (above). In a resolution, a common cause is a pin of the node that has no wheel "
            "for the target Python (the default node is the H200's, Python 3.12: give --node-freeze for another)."
        )


def build_lab(work: Path) -> Path:
    """The lab's wheel, built from a copy of the tree (a stale build/ in the tree cannot leak into it)."""
    src = work / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for folder in ("conf", "gigpo_lab", "sweeps"):
        shutil.copytree(ROOT / folder, src / folder, ignore=skip)
    (src / "experiments").mkdir()
    for yaml_file in (ROOT / "experiments").glob("*.yaml"):
        shutil.copy2(yaml_file, src / "experiments")
    # This Python's setuptools builds it when it has one (no index needed for the build backend).
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    pip("wheel", "-q", "--no-deps", *isolation, "-w", str(work / "lab"), str(src))
    return next((work / "lab").glob("*.whl"))


def report_of(work: Path, name: str, *args: str) -> dict[str, dict]:
    """``pip install --dry-run --report`` (metadata only, nothing installed): its items by canonical name."""
    pip("install", "-q", "--dry-run", "--ignore-installed", "--report", str(work / name), *args)
    items = json.loads((work / name).read_text())["install"]
    return {canonicalize_name(i["metadata"]["name"]): i for i in items}


def build_here(names: list[str], roots: Path, work: Path) -> Path:
    """Wheels of the projects in ``names`` that the roots need, built here: pip refuses sdists in a resolution
    for another platform, so their versions come from a resolution for this Python, then ``pip wheel``."""
    built = work / "built"
    built.mkdir()
    native = report_of(
        work, "native.json", "-r", str(roots)
    )  # unconstrained: a node pin may not fit this Python
    for name in map(canonicalize_name, names):
        if name in native:
            version = native[name]["metadata"]["version"]
            pip("wheel", "-q", "--no-deps", "-w", str(built), f"{name}=={version}")
            tags = [t for _, f in wheel_projects(built).get(name, []) for t in parse_wheel_filename(f)[3]]
            if not tags or any(t.abi != "none" or t.platform != "any" for t in tags):
                raise SystemExit(f"{name} {version} built here is not pure Python: no use on another machine")
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python-version", default=f"{sys.version_info[0]}.{sys.version_info[1]}")
    parser.add_argument("--node-freeze", type=Path, default=DEFAULT_NODE, help="the node's `pip freeze`")
    parser.add_argument("--out", type=Path, default=ROOT / "wheelhouse", help="the folder of wheels")
    parser.add_argument("--glibc", default="2.28", help="the newest manylinux_2_N tag taken (default 2.28)")
    parser.add_argument("--build", action="append", default=list(BUILD_HERE), help="build this project here")
    args = parser.parse_args(argv)
    node = read_node(args.node_freeze.read_text())
    node.pop(canonicalize_name(LAB), None)
    env = target_env(args.python_version)
    target = ["--python-version", args.python_version, "--implementation", "cp"]
    target += [f"--platform={tag}" for tag in platforms(args.glibc)]
    print(
        f"node: {args.node_freeze} ({len(node)} projects, {sum(1 for v in node.values() if v)} with versions)"
    )
    with tempfile.TemporaryDirectory(prefix="wheelhouse-") as tmp:
        work = Path(tmp)
        lab = build_lab(work)
        lab_requires = requires_dist(lab)
        roots = [Requirement(r) for r in lab_requires]
        wanted = [str(r) for r in roots if applies(r, env) and canonicalize_name(r.name) not in node]
        (work / "roots.txt").write_text("\n".join(wanted) + "\n")
        (work / "node-constraints.txt").write_text("\n".join(constraints(node)) + "\n")
        built = build_here(args.build, work / "roots.txt", work)
        report = report_of(
            work, "report.json", "--target", str(work / "nowhere"), "--only-binary=:all:", *target,
            "--find-links", str(built), "-c", str(work / "node-constraints.txt"), "-r", str(work / "roots.txt"),
        )  # fmt: skip
        via = closure(roots, report, node, env)
        version = {name: report[name]["metadata"]["version"] for name in via}
        wheels = work / "wheels"
        here = {n for n in wheel_projects(built) if n in via}
        download = [f"{n}=={version[n]}" for n in sorted(via) if n not in here]
        if download:
            pip("download", "-q", "--no-deps", "--only-binary=:all:", *target, "-d", str(wheels), *download)
        for name in here:
            for _, file in wheel_projects(built)[name]:
                shutil.copy2(built / file, wheels)
        shutil.copy2(lab, wheels)
        version[canonicalize_name(LAB)] = parse_wheel_filename(lab.name)[1].public
        problems = check_folder(wheels, version)
        if problems:
            raise SystemExit("the wheelhouse is wrong:\n  " + "\n  ".join(problems))
        needs = {LAB: (lab_requires, set())}
        needs.update({n: (report[n]["metadata"].get("requires_dist") or [], set()) for n in via})
        conflicts = node_conflicts(needs, node, env)
        args.out.mkdir(parents=True, exist_ok=True)
        for old in [*args.out.glob("*.whl"), args.out / "wheelhouse.txt"]:
            old.unlink(missing_ok=True)
        lines = []
        for name, (_, file) in sorted((n, v[0]) for n, v in wheel_projects(wheels).items()):
            shutil.move(str(wheels / file), args.out / file)
            size = (args.out / file).stat().st_size
            lines.append(f"{file}  {size / 1e6:.2f} MB  {'built here, ' if name in here else ''}"
                         f"needed by {via.get(name, 'the user: the lab itself')}")  # fmt: skip
    total = sum(p.stat().st_size for p in args.out.glob("*.whl"))
    head = [
        f"# {len(lines)} wheels, {total / 1e6:.1f} MB, for CPython {args.python_version} on x86_64 manylinux "
        f"(glibc <= {args.glibc}); the node: {args.node_freeze.name} ({len(node)} projects left out)",
        *(f"# node version conflict: {c}" for c in conflicts),
    ]
    (args.out / "wheelhouse.txt").write_text("\n".join(head + lines) + "\n")
    print("\n".join(head[1:] + [head[0].lstrip("# ") + f" in {args.out}"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
