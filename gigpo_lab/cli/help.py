"""``gigpo-lab train --help``: the page Hydra prints through ``conf/hydra/help/lab.yaml``.

The template there names the resolver ``${gigpo_lab.cli.help:}``, registered here, which lists what the config
folders hold: each group's options (the default marked; structured-config schemas are not files, so they
never show), and each experiment and sweep with the first line of its comment. Reading folders and
comments only, so the page costs no import beyond Hydra's composition; ``page`` renders it without composing
(``gigpo-lab train --help`` prints that).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from omegaconf import OmegaConf

from gigpo_lab.config_paths import conf_dir, config_groups, config_root

#: Widest line of the page.
WIDTH = 100


def _first_comment(path: Path) -> str:
    """The first comment line of a YAML file that is not the ``@package`` line, shortened to one line."""
    for line in path.read_text().splitlines():
        text = line.strip()
        if text.startswith("#") and "@package" not in text:
            return text.lstrip("# ").strip()
    return ""


def _shorten(text: str, room: int) -> str:
    """The text up to its first aside (`` (``, ``: ``) when that is long enough to say something, within
    ``room`` characters."""
    for mark in (" (", ": "):
        cut = text.find(mark, 20)
        if cut > 0:
            text = text[:cut]
    return text if len(text) <= room else text[: room - 1].rstrip(" ,;:(") + "…"


def _defaults() -> dict[str, str]:
    """The root config's default option per group (``estimator: gigpo`` ...)."""
    out = {}
    for item in OmegaConf.load(conf_dir() / "config.yaml").get("defaults", []):
        if OmegaConf.is_dict(item):
            for group, option in item.items():
                if not str(group).startswith("override") and option is not None:
                    out[str(group)] = str(option)
    return out


def groups_text() -> str:
    """One entry per config group: its options in order, the default marked, wrapped to the page width."""
    defaults = _defaults()
    lines = []
    groups = config_groups()
    width = max(map(len, groups), default=0)
    for group, options in groups.items():
        default = defaults.get(group)
        shown = [f"{o} (default)" if o == default else o for o in options]
        lead = f"  {group:<{width}} "
        lines.append(
            textwrap.fill(
                ", ".join(shown),
                WIDTH,
                initial_indent=lead,
                subsequent_indent=" " * len(lead),
                break_on_hyphens=False,
            )
        )
    return "\n".join(lines)


def files_text(group: str) -> str:
    """One line per file of ``experiments/`` or ``sweeps/``: its name and the first line of its comment."""
    lines = []
    for path in sorted((config_root() / group).glob("*.yaml")):
        lines.append(f"  {path.stem:<24} " + _shorten(_first_comment(path), WIDTH - 28))
    return "\n".join(lines)


def help_page() -> str:
    """The middle of the help page: groups, experiments and sweeps."""
    return (
        "Config groups (group=option):\n"
        + groups_text()
        + "\n\nExperiments (experiments=NAME; the ones that sweep run as a multirun):\n"
        + files_text("experiments")
        + "\n\nSweeps (sweeps=NAME; a multirun, no -m needed):\n"
        + files_text("sweeps")
    )


def register_help_resolver() -> None:
    OmegaConf.register_new_resolver("gigpo_lab.cli.help", help_page, replace=True)


def page() -> str | None:
    """The whole page, ``conf/hydra/help/lab.yaml``'s template resolved as Hydra resolves it, without
    composing the config; None when the template asks for one of Hydra's ``$`` fields (``$CONFIG``,
    ``$APP_CONFIG_GROUPS``...), which only Hydra fills. Hydra's own ``--help`` composes the config and lists
    every option of every group for those fields whether or not the template uses them: seconds of copying
    the ConfigStore, for a page that reads folders only."""
    help_cfg = OmegaConf.load(conf_dir() / "hydra" / "help" / "lab.yaml")
    register_help_resolver()
    text = OmegaConf.create({"hydra": {"help": help_cfg}}).hydra.help.template
    return None if "$" in text.replace("${", "") else text
