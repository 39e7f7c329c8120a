"""A real env that fails on chosen episodes: the fault injector of ``test_faults.py`` and ``test_faults_slow.py``.

Its own module, importing only the package, because training subprocesses load it by name
(``env._target_=tests.tracking.faulty_env.make_faulty_env``) with only the repository on ``PYTHONPATH``:
a test module's own test-only imports would not resolve there.
"""

from __future__ import annotations

import math
import time

import gymnasium

from gigpo_lab.envs import make_env

CRASH = "simulated env crash"


class FaultyEnv(gymnasium.Wrapper):
    """A real env that fails on step ``fault_turn`` of episodes reset with a seed in ``fault_seeds``.

    ``fault``: ``raise`` (a RuntimeError from ``step``), ``nan_reward`` or ``inf_reward`` (the step's
    reward), or ``none``. ``step_delay_s`` paces every step (the slow tests need runs of known length).
    """

    def __init__(self, env, fault: str, fault_seeds, fault_turn: int = 0, step_delay_s: float = 0.0):
        super().__init__(env)
        self.fault, self.fault_seeds, self.fault_turn = fault, set(fault_seeds), fault_turn
        self.step_delay_s = step_delay_s
        self._seed, self._turn = None, 0

    def reset(self, *, seed=None, options=None):
        self._seed, self._turn = seed, 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        hit = self.fault != "none" and self._seed in self.fault_seeds and self._turn == self.fault_turn
        self._turn += 1
        time.sleep(self.step_delay_s)
        if hit and self.fault == "raise":
            raise RuntimeError(f"{CRASH} (seed {self._seed})")
        obs, reward, terminated, truncated, info = self.env.step(action)
        if hit:
            reward = {"nan_reward": math.nan, "inf_reward": math.inf}[self.fault]
        return obs, reward, terminated, truncated, info


def make_faulty_env(
    fault: str = "raise", fault_seeds=(), fault_turn: int = 0, step_delay_s: float = 0.0, **kwargs
):
    """``make_env(**kwargs)`` wrapped in ``FaultyEnv`` (an ``env._target_`` for Hydra)."""
    return FaultyEnv(make_env(**kwargs), fault, fault_seeds, fault_turn, step_delay_s)
