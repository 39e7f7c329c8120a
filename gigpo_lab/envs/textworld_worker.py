"""A TextWorld game-generation worker: ``main([CHALLENGE, SETTINGS_JSON, FOLDER])`` in a fresh interpreter
(``textworld_generation.WORKER``).

Run as the lab's own module in a fresh interpreter (``subprocess``), never through ``multiprocessing``: a
``spawn`` or ``forkserver`` child imports the caller's main module again, which fails in a script without an
``if __name__ == "__main__":`` guard (issue #63). It reads one seed per line from stdin, makes that game
(``textworld_generation.make_game``) and answers one JSON line, ``["ok", ""]`` or ``["error", "<Type>:
<message>"]``, until stdin closes. Anything textworld prints goes to stderr: stdout carries the answers only.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> int:
    from gigpo_lab.envs.textworld_generation import _die_if_told, make_game

    challenge, settings, folder = argv[0], json.loads(argv[1]), argv[2]
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever writes to fd 1 from here on (textworld, Inform) goes to stderr
    sys.stdout = sys.stderr
    for line in sys.stdin:
        seed = int(line)
        try:
            make_game(challenge, settings, seed, folder, before_publish=lambda s=seed: _die_if_told(s))
            answers.write(json.dumps(["ok", ""]) + "\n")
        except Exception as err:  # a textworld exception: reported as text, the parent names the game
            answers.write(
                json.dumps(["error", f"{type(err).__name__}: {' '.join(str(err).split())}"[:500]]) + "\n"
            )
    return 0
