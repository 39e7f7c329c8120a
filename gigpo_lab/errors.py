"""The lab's own error types for a mistake the user makes, at the bottom layer so any module can raise them.

``ConfigError`` is a config mistake the config alone shows; ``gigpo_lab.cli.errors.explain`` prints it in one
line with exit status 2.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A mistake in the config that the config alone shows (a bad value, a missing required key, a combination
    the lab cannot run): raised before anything is written; ``gigpo-lab train`` prints it in one line, exit 2."""
