"""Run the code blocks of a Markdown page as a test (docs/TUTORIAL.md, docs/ARCHITECTURE.md).

The convention, for the writers of those pages:

- Every ```bash block is run, command by command, in one scratch folder shared by the whole page (a
  trailing backslash continues a line, ``#`` starts a comment, ``VAR=value`` prefixes set the environment).
- Every ``gigpo-lab train`` command gets the tiny-size overrides ``TINY`` appended (one iteration of
  2 groups x 2 envs), before trailing flags such as ``--cfg job``; a command with ``--cfg`` or ``--info``
  only composes, so it gets none.
- A block whose first line is ``# file: PATH`` (```python, ```yaml, ...) is written to PATH first.
- An HTML comment ``<!-- test: ... -->`` right above a block (blank lines allowed) adjusts it:
  ``append="ARGS"`` appends ARGS to each gigpo-lab command (``{port}`` becomes a free port);
  ``slow`` runs the block only in the slow test; ``fails`` expects every command to exit non-zero;
  ``background="TEXT"`` runs the command until it prints TEXT, then sends SIGINT and expects exit 0;
  ``expect="TEXT"`` requires TEXT in each command's output; ``creates="A,B"`` requires these paths after.

Two ways to run a page: ``run_fast`` executes the gigpo-lab commands in one child Python process
(``gigpo_lab.cli.main`` in-process, imports paid once) and skips ``slow`` blocks; ``run_shell`` runs every
command through bash as a user would, slow blocks included. Run as a script, this module is that child.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tiny_sizes import TINY as SUITE_TINY

#: One iteration of 2 groups x 2 envs, short episodes (the suite's TINY, cut to one iteration); appended to
#: every `gigpo-lab train`.
TINY = ["trainer.iterations=1" if o.startswith("trainer.iterations=") else o for o in SUITE_TINY]
TRAILING_FLAGS = {"--cfg", "-c", "--info", "-i", "--resolve", "--package", "-p"}
COMPOSE_ONLY = {"--cfg", "-c", "--info", "-i"}
_DIRECTIVE = re.compile(r"<!--\s*test:(.*?)-->", re.S)
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


@dataclass
class Block:
    lang: str
    text: str
    line: int
    options: dict[str, str | bool] = field(default_factory=dict)

    @property
    def file(self) -> str | None:
        first = self.text.splitlines()[0] if self.text else ""
        return first.split(":", 1)[1].strip() if first.startswith("# file:") else None


def blocks(markdown: str) -> list[Block]:
    """The fenced blocks of ``markdown`` with the directive right above each."""
    out = []
    for m in _FENCE.finditer(markdown):
        before = markdown[: m.start()].rstrip()
        options: dict[str, str | bool] = {}
        if before.endswith("-->"):
            d = _DIRECTIVE.search(before, before.rfind("<!--"))
            if d:
                for item in shlex.split(d.group(1)):
                    key, eq, value = item.partition("=")
                    options[key] = value if eq else True
        out.append(Block(m.group(1), m.group(2), markdown.count("\n", 0, m.start()) + 1, options))
    return out


def commands(block: Block) -> list[str]:
    """The commands of a bash block: continuation lines joined, comments and blank lines dropped."""
    out, pending = [], ""
    for line in block.text.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line = pending + line
        pending = ""
        if shlex.split(line, comments=True):
            out.append(line)
    return out


def add_lab_files(markdown: str, heading: str, root: Path) -> list[str]:
    """Write the ``# lab file: PATH`` blocks of the section ``heading`` (the in-lab recipes of ARCHITECTURE.md)
    under ``root``; return their paths inside the lab, sorted."""
    section = markdown.split(heading)[1].split("\n### ")[0]
    written = []
    for block in blocks(section):
        first = block.text.splitlines()[0] if block.text else ""
        if first.startswith("# lab file:"):
            written.append(first.split(":", 1)[1].strip())
            _write(root / written[-1], block.text)
    return sorted(written)


def lab_search_path(root: Path) -> str:
    """The override that puts ``root/conf`` on Hydra's search path beside the lab's own config root."""
    from gigpo_lab.config_paths import config_root

    return f"hydra.searchpath=[file://{config_root()},file://{root / 'conf'}]"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def expand(command: str, append: str = "") -> tuple[dict[str, str], list[str]]:
    """(environment assignments, argv) of a command, with TINY and ``append`` added to gigpo-lab commands."""
    tokens = shlex.split(command, comments=True)
    env = {}
    while tokens and re.match(r"^[A-Za-z_]\w*=", tokens[0]):
        key, _, value = tokens.pop(0).partition("=")
        env[key] = value
    if tokens[:1] != ["gigpo-lab"]:
        return env, tokens
    extra = shlex.split(append.replace("{port}", str(free_port()))) if append else []
    if tokens[1:2] == ["train"] and not COMPOSE_ONLY & {*tokens, *extra}:
        extra = [*TINY, *extra]
    cut = next((i for i, t in enumerate(tokens) if t in TRAILING_FLAGS), len(tokens))
    split = next(
        (i for i, t in enumerate(extra) if t in TRAILING_FLAGS), len(extra)
    )  # appended flags go last
    return env, [*tokens[:cut], *extra[:split], *tokens[cut:], *extra[split:]]


@dataclass
class Step:
    """One thing to do: write a file, or run a command (with what to expect of it)."""

    where: str  # "TUTORIAL.md:123" for messages
    write: tuple[str, str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    fails: bool = False
    background: str = ""
    expect: str = ""
    creates: list[str] = field(default_factory=list)


def plan(markdown: str, name: str, *, slow: bool) -> list[Step]:
    """The steps of a page, in order; ``slow`` includes the blocks marked slow."""
    steps = []
    for b in blocks(markdown):
        where = f"{name}:{b.line}"
        if b.options.get("slow") and not slow:
            continue
        if b.file:
            steps.append(Step(where, write=(b.file, b.text)))
            continue
        if b.lang != "bash":
            continue
        for command in commands(b):
            env, argv = expand(command, str(b.options.get("append", "")))
            steps.append(
                Step(
                    where,
                    env=env,
                    argv=argv,
                    fails=bool(b.options.get("fails")),
                    background=str(b.options.get("background", "")),
                    expect=str(b.options.get("expect", "")),
                )
            )
        if b.options.get("creates") and steps:
            steps[-1].creates = str(b.options["creates"]).split(",")
    return steps


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _bin_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of a user's shell in the venv: its bin first on PATH, no inherited PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def _background(step: Step, cwd: Path, timeout: float = 180) -> str:
    log = cwd / f".background-{time.monotonic_ns()}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            step.argv, cwd=cwd, env=_bin_env(step.env), stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + timeout
        while step.background not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"{step.where}: no {step.background!r} from {step.argv}:\n{log.read_text()[-3000:]}"
                )
            time.sleep(0.25)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    if code != 0:
        raise AssertionError(
            f"{step.where}: {shlex.join(step.argv)} exited {code} after SIGINT:\n{text[-3000:]}"
        )
    return text


def _check(step: Step, code: int, output: str, cwd: Path) -> None:
    shown = shlex.join([*(f"{k}={v}" for k, v in step.env.items()), *step.argv])
    if step.fails and code == 0:
        raise AssertionError(f"{step.where}: expected `{shown}` to fail, it exited 0:\n{output[-3000:]}")
    if not step.fails and code != 0:
        raise AssertionError(f"{step.where}: `{shown}` exited {code}:\n{output[-5000:]}")
    if step.expect and step.expect not in output:
        raise AssertionError(
            f"{step.where}: no {step.expect!r} in the output of `{shown}`:\n{output[-3000:]}"
        )
    for path in step.creates:
        if not list(cwd.glob(path)):
            raise AssertionError(f"{step.where}: `{shown}` did not create {path}")


def run_shell(steps: list[Step], cwd: Path, timeout: float = 900) -> None:
    """Every step through bash, as a user would type it."""
    for step in steps:
        if step.write:
            _write(cwd / step.write[0], step.write[1])
            continue
        if step.background:
            _check(step, 0, _background(step, cwd), cwd)
            continue
        line = shlex.join(step.argv)
        out = subprocess.run(
            ["bash", "-c", line],
            cwd=cwd,
            env=_bin_env(step.env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        _check(step, out.returncode, out.stdout + out.stderr, cwd)


def run_fast(steps: list[Step], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """All steps in one child Python (see ``_drive``); returns the finished process (check its returncode)."""
    (cwd / ".plan.json").write_text(json.dumps([vars(s) for s in steps]))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), str(cwd / ".plan.json")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _run_in_process(step: Step, cwd: Path) -> tuple[int, str]:
    """A gigpo-lab command through ``gigpo_lab.cli.main``; its stdout captured; env and sys.path restored."""
    import contextlib
    import importlib
    import io

    from gigpo_lab.cli import main

    saved_env, saved_path, saved_argv = dict(os.environ), list(sys.path), list(sys.argv)
    os.environ.update(step.env)
    for entry in reversed(step.env.get("PYTHONPATH", "").split(os.pathsep)):
        if entry:
            sys.path.insert(0, str((cwd / entry).resolve()))
    importlib.invalidate_caches()
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            try:
                code = main(step.argv[1:])
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:], sys.argv[:] = saved_path, saved_argv
    sys.stdout.write(buffer.getvalue())
    return int(code or 0), buffer.getvalue()


def _drive(plan_file: str) -> int:
    """The child of ``run_fast``: run the steps in order; the first failure ends it with exit code 1."""
    cwd = Path.cwd()
    for raw in json.loads(Path(plan_file).read_text()):
        step = Step(**raw)
        start = time.perf_counter()
        try:
            if step.write:
                _write(cwd / step.write[0], step.write[1])
                continue
            if step.background:
                _check(step, 0, _background(step, cwd), cwd)
            elif step.argv[:1] == ["gigpo-lab"]:
                code, output = _run_in_process(step, cwd)
                _check(step, code, output, cwd)
            else:
                out = subprocess.run(
                    step.argv, cwd=cwd, env=_bin_env(step.env), capture_output=True, text=True
                )
                _check(step, out.returncode, out.stdout + out.stderr, cwd)
        except AssertionError as err:
            sys.stderr.write(f"\nDOC STEP FAILED: {err}\n")
            return 1
        sys.stderr.write(f"\nDOC STEP OK ({time.perf_counter() - start:.1f} s): {shlex.join(step.argv)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(_drive(sys.argv[1]))
