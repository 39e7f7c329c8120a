"""One or two lines for a mistake on the ``gigpo-lab train`` command line, instead of a traceback.

``explain(err)`` turns what Hydra, omegaconf or ``validate_config`` raise for a config mistake into a message
that names the key, the bad value and the allowed values or a close match, e.g.::

    gigpo-lab train: estimator.step_advantage_wieght is not a key of estimator; did you mean
      estimator.step_advantage_weight? (keys: gamma, step_advantage_weight, ...)

and exit status 2 (a usage error). Any other failure gets one line with its type and first sentence, and
exit status 1. ``gigpo_lab.cli.train.main`` prints these unless ``verbose=true`` or ``HYDRA_FULL_ERROR=1`` asks
for the traceback. Works on top of whatever the composition raises; needs no schema of its own.
"""

from __future__ import annotations

import difflib
import re
import sys

#: Exit status of a command-line mistake (argparse's and Hydra's usage-error convention).
USAGE_ERROR = 2
#: The hint that ends every message: how to see the whole traceback.
TRACEBACK_HINT = "(verbose=true or HYDRA_FULL_ERROR=1 shows the traceback)"
PROG = "gigpo-lab train"
#: Keys that moved to another group: the old spelling fails at compose time (the old node no longer has the
#: key), and the message names the new one.
MOVED_KEYS = {
    **{
        f"trainer.{k}": f"lightning.{k}"
        for k in (
            "accelerator",
            "devices",
            "strategy",
            "precision",
            "deterministic",
            "progress_bar",
            "num_threads",
        )
    },
    "estimator.kl_in_reward": "loss.kl_in_reward",
}
#: Options that moved to another group (``trainer=ddp`` is now ``lightning=ddp``).
MOVED_OPTIONS = {f"trainer={o}": f"lightning={o}" for o in ("cpu", "gpu", "ddp")}


def public_options(options) -> list[str]:
    """A group's options without the structured-config schemas stored beside them (``*_schema``)."""
    return sorted(o for o in options if not str(o).endswith("_schema"))


def _close(word: str, candidates) -> str:
    """`` did you mean X?`` for the closest candidate, or nothing."""
    match = difflib.get_close_matches(word, [str(c) for c in candidates], n=1, cutoff=0.6)
    return f"; did you mean {match[0]}?" if match else ""


def _listing(what: str, items, limit: int = 12) -> str:
    items = [str(i) for i in items]
    shown = ", ".join(items[:limit]) + (", ..." if len(items) > limit else "")
    return f" ({what}: {shown})" if items else ""


def _missing_option(err) -> str:
    """``estimator=gipo``: the group's real options (schemas hidden) and the closest one."""
    path = str(getattr(err, "missing_cfg_file", "") or "")
    found = re.search(r"Could not find '([^']+)'", str(err))
    path = path or (found.group(1) if found else "")
    group, _, name = path.rpartition("/")
    options = public_options(getattr(err, "options", None) or [])
    if not group:  # the primary config itself
        return f"{PROG}: {str(err).splitlines()[0]}"
    if f"{group}={name}" in MOVED_OPTIONS:
        return f"{PROG}: {group}={name} moved to {MOVED_OPTIONS[f'{group}={name}']}"
    return f"{PROG}: {group}={name} is not an option{_close(name, options)}{_listing('options', options)}"


def _unknown_key(cause) -> str:
    """``trainer.iteratons=3``: the node's keys and the closest one."""
    full_key = str(getattr(cause, "full_key", "") or getattr(cause, "key", ""))
    if full_key in MOVED_KEYS:
        return f"{PROG}: {full_key} moved to {MOVED_KEYS[full_key]}"
    parent, _, last = full_key.rpartition(".")
    node = getattr(cause, "parent_node", None)
    keys = sorted(str(k) for k in node.keys()) if node is not None else []
    close = _close(last, keys)
    if close:
        close = close.replace("mean ", f"mean {parent}." if parent else "mean ", 1)
    where = f"of {parent}" if parent else "at the top level"
    return f"{PROG}: {full_key} is not a key {where}{close}{_listing('keys', keys)}"


def _moved_in_file(text: str) -> str | None:
    """A config file (an experiment, a sweep) that still sets a moved key: Hydra names only the file and the
    key's last part (``Key 'num_threads' not in 'TrainerConfig'``)."""
    found = re.search(r"In '([^']+)'.*Key '([^']+)' not in", text, re.S)
    if not found:
        return None
    where, key = found.groups()
    old = [k for k in MOVED_KEYS if k.rsplit(".", 1)[1] == key]
    return f"{PROG}: in {where}: {old[0]} moved to {MOVED_KEYS[old[0]]}" if len(old) == 1 else None


def _bad_type(cause) -> str:
    """``rollout.groups=two``: the key, the value, and omegaconf's first line (what it expected)."""
    first = str(getattr(cause, "msg", "") or cause).splitlines()[0]
    key = getattr(cause, "full_key", None) or getattr(cause, "key", "?")
    return f"{PROG}: {key}={getattr(cause, 'value', '?')}: {first}"


def explain(err: BaseException) -> tuple[int, str]:
    """(exit status, message) for a failure of ``gigpo-lab train``; status 2 for a config mistake."""
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
    from omegaconf.errors import (
        ConfigAttributeError,
        ConfigKeyError,
        MissingMandatoryValue,
        ValidationError,
    )

    from gigpo_lab.errors import ConfigError

    # an estimator the env cannot feed (GiGPO without anchors); loaded already if that is what was raised
    prepare = sys.modules.get("gigpo_lab.algorithm.prepare")
    usage_errors = (ConfigError, *((prepare.MissingColumnError,) if prepare is not None else ()))

    cause = err.__cause__
    if isinstance(err, MissingConfigException):
        return USAGE_ERROR, _missing_option(err)
    if isinstance(err, ConfigCompositionException) and isinstance(
        cause, ConfigAttributeError | ConfigKeyError
    ):
        return USAGE_ERROR, _unknown_key(cause)
    if isinstance(err, ConfigCompositionException) and isinstance(cause, ValidationError):
        return USAGE_ERROR, _bad_type(cause)
    moved = _moved_in_file(str(err)) if isinstance(err, ConfigCompositionException) else None
    if moved:
        return USAGE_ERROR, moved
    if isinstance(err, ConfigCompositionException | OverrideParseException):
        lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
        return USAGE_ERROR, f"{PROG}: " + "\n  ".join(lines[:2])
    if isinstance(err, MissingMandatoryValue):
        key = getattr(err, "full_key", None) or getattr(err, "key", "?")
        return USAGE_ERROR, f"{PROG}: {key} is required and has no default; add {key}=<value> to the command"
    if isinstance(err, usage_errors):
        return USAGE_ERROR, f"{PROG}: {err}"
    first = (str(err).strip().splitlines() or [""])[0][:400]
    return 1, f"{PROG}: {type(err).__name__}: {first}\n  {TRACEBACK_HINT}"
