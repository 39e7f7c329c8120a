"""A study's registration: the spec's hash, commit and time, and every amendment since, in a file beside it.

``<spec>.registration.yaml`` is written by ``gigpo-lab study register`` and committed by the user. From then
on ``run`` and ``analyse`` compare the spec's hash with the registered one (or the last amendment's) and refuse
a spec that changed without an amendment. An amendment records its time, its reason, the user's statement of
whether any confirmatory result had been seen, and the number of confirmatory rows that existed then (counted
by the tool from the study's folder and store). Every report lists the amendments.
"""

from __future__ import annotations

import datetime as dt
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from gigpo_lab.study.spec import LoadedSpec, SpecError


@dataclass
class Amendment:
    """One change to a registered spec."""

    #: When it was recorded (UTC, ISO 8601).
    at: str
    #: The spec's hash after the change.
    hash: str
    #: Why the spec changed.
    reason: str
    #: The user's statement: had any confirmatory result been seen when the change was made?
    seen_confirmatory: bool
    #: Confirmatory rows (runs on the confirmatory seeds) that existed then, counted by the tool; null = not
    #: counted (an amendment recorded before the tool existed).
    confirmatory_rows: int | None
    #: The commit the change was recorded at, when in a git checkout.
    commit: str | None = None


@dataclass
class Registration:
    """What ``<spec>.registration.yaml`` holds."""

    #: The spec's hash when it was registered.
    hash: str
    #: When (UTC, ISO 8601).
    at: str
    #: The commit it was registered at, when in a git checkout.
    commit: str | None
    #: Every change since, in order.
    amendments: list[Amendment] = field(default_factory=list)
    #: Anything a reader must know about how the registration came to be (a study registered before specs).
    note: str | None = None

    @property
    def current(self) -> str:
        """The hash the spec must have now."""
        return self.amendments[-1].hash if self.amendments else self.hash


def path_of(loaded: LoadedSpec) -> Path:
    """``<folder>/<stem>.registration.yaml`` beside the spec."""
    return loaded.path.with_name(f"{loaded.path.stem}.registration.yaml")


def load(loaded: LoadedSpec) -> Registration | None:
    """The spec's registration, or None when it has none."""
    path = path_of(loaded)
    if not path.is_file():
        return None
    raw = yaml.safe_load(path.read_text())
    amendments = [Amendment(**a) for a in raw.pop("amendments", None) or []]
    return Registration(**raw, amendments=amendments)


def save(loaded: LoadedSpec, registration: Registration) -> Path:
    path = path_of(loaded)
    text = ("# Written by `gigpo-lab study register`; commit it. A change to the spec needs an amendment "
            "(`gigpo-lab study register SPEC --amend ...`).\n")  # fmt: skip
    path.write_text(text + yaml.safe_dump(asdict(registration), sort_keys=False, allow_unicode=True))
    return path


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def head_commit(folder: Path) -> str | None:
    """The checkout's HEAD commit, with ``+dirty`` when it has uncommitted changes; None outside git."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=folder, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def register(loaded: LoadedSpec) -> Path:
    """Write a new registration; ``SpecError`` when one exists (a change is an amendment)."""
    if load(loaded) is not None:
        raise SpecError(f"{path_of(loaded)}: already registered; record a change with --amend --reason '...' "
                        "--seen-confirmatory yes|no")  # fmt: skip
    return save(loaded, Registration(loaded.hash, now(), head_commit(loaded.path.parent)))


def amend(loaded: LoadedSpec, reason: str, seen: bool, confirmatory_rows: int) -> Path:
    """Append an amendment for the spec as it is now; ``SpecError`` when unregistered or unchanged."""
    registration = load(loaded)
    if registration is None:
        raise SpecError(f"{loaded.path}: not registered; run `gigpo-lab study register {loaded.path}` first")
    if registration.current == loaded.hash:
        raise SpecError(
            f"{loaded.path}: unchanged since its registration or last amendment; nothing to amend"
        )
    if not reason.strip():
        raise SpecError("--reason: empty; say why the spec changed")
    commit = head_commit(loaded.path.parent)
    registration.amendments.append(Amendment(now(), loaded.hash, reason, seen, confirmatory_rows, commit))
    return save(loaded, registration)


def check(loaded: LoadedSpec) -> Registration | None:
    """The registration of an unchanged spec (None when unregistered); ``SpecError`` when the spec changed
    since its registration or last amendment."""
    registration = load(loaded)
    if registration is not None and registration.current != loaded.hash:
        raise SpecError(
            f"{loaded.path}: changed since it was registered (hash {loaded.hash}, registered "
            f"{registration.current}); undo the change, or record it: gigpo-lab study register {loaded.path} "
            "--amend --reason '...' --seen-confirmatory yes|no"
        )
    return registration


def summary(registration: Registration | None) -> list[str]:
    """Markdown lines: the registration and every amendment (every report starts with them)."""
    if registration is None:
        return ["**Not registered:** an exploratory analysis; `gigpo-lab study register SPEC` before any "
                "confirmatory run.", ""]  # fmt: skip
    lines = [f"Registered {registration.at} at commit {registration.commit or 'unknown'} (spec {registration.hash}).",
             ""]  # fmt: skip
    if registration.note:
        lines += [registration.note, ""]
    if registration.amendments:
        lines += ["Amendments:", ""]
        lines += [f"- {a.at} (spec {a.hash}, commit {a.commit or 'unknown'}): {a.reason} Confirmatory results seen: "
                  f"{'yes' if a.seen_confirmatory else 'no'}; confirmatory rows then: "
                  f"{'not counted' if a.confirmatory_rows is None else a.confirmatory_rows}."
                  for a in registration.amendments]  # fmt: skip
        lines += [""]
    return lines
