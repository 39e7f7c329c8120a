"""``import textworld``, or a one-line error naming the extra to install: what the TextWorld modules share."""

from __future__ import annotations

from typing import Any

from gigpo_lab.errors import ConfigError


def require_textworld() -> Any:
    """``import textworld`` (with its challenges and generator), or a one-line ConfigError naming the extra."""
    try:
        import textworld
        import textworld.challenges  # noqa: F401  (registers the challenges)
        import textworld.generator  # noqa: F401
    except ImportError as err:
        raise ConfigError(
            f"the TextWorld env needs the textworld package ({err}); pip install 'gigpo_lab[textworld]'"
        ) from err
    return textworld
