"""What the tests of the JVM benchmarks (TextWorldExpress, ScienceWorld) share: the skip without Java or without
the packages, and the small settings they build their envs with."""

from __future__ import annotations

import importlib.util

import pytest

from gigpo_lab.envs.jvm import JavaMissing, require_java


def _java_problem() -> str | None:
    try:
        require_java("these tests")
    except JavaMissing as err:
        return str(err)
    return None


#: Skips a test that needs Java, with the fix as the reason.
needs_java = pytest.mark.skipif(_java_problem() is not None, reason=_java_problem() or "")
#: Skips a test that needs textworld-express (the dev extra installs it).
needs_twx = pytest.mark.skipif(
    importlib.util.find_spec("textworld_express") is None,
    reason="textworld-express is not installed: pip install 'gigpo_lab[benchmarks]'",
)
#: Skips a test that needs scienceworld (the dev extra installs it).
needs_scienceworld = pytest.mark.skipif(
    importlib.util.find_spec("scienceworld") is None,
    reason="scienceworld is not installed: pip install 'gigpo_lab[benchmarks]'",
)

TWX = "gigpo_lab/TextWorldExpress-v0"
SCIENCEWORLD = "gigpo_lab/ScienceWorld-v0"
#: The easiest settings of each TextWorldExpress game, as the presets have them.
TWX_GAMES = {
    "twc": {"numLocations": 1, "numItemsToPutAway": 1, "includeDoors": 0, "limitInventorySize": 0},
    "cookingworld": {
        "numLocations": 1,
        "numIngredients": 1,
        "numDistractorItems": 0,
        "includeDoors": 0,
        "limitInventorySize": 0,
    },
    "coin": {"numLocations": 3, "numDistractorItems": 0, "includeDoors": 1, "limitInventorySize": 0},
}
#: A small run's instances: 3 train seeds and 2 dev seeds, 2 short exploring walks each.
TWX_SMALL = {"num_games": 3, "num_eval_games": 2, "explore_walks": 2, "explore_length": 15}


def twx_kwargs(game: str) -> dict:
    return {"game": game, "game_params": TWX_GAMES[game], **TWX_SMALL}
