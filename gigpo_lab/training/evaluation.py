"""Held-out evaluation: a sampled success rate with resolution, greedy success beside it, and the run's primary
metrics read off the curve.

Each evaluation plays ``eval_episodes`` held-out episodes (``seeds.eval_seeds``: the same reset seeds at every
evaluation, so held-out maps or games on an env that draws them from the seed) by sampling at
``eval_temperature``. Episode i samples from its own stream (``seeds.eval_stream_seed``: the run's seed and i),
the same at every evaluation (common random numbers: two evaluations of one run, or of two runs with the same
seed, differ by the policy alone), and independent of the episodes played beside it. Greedy decoding on a
deterministic env is one bit per map; sampling gives a rate. verl-agent validates by sampling at temperature 0.4
(``actor_rollout_ref.rollout.val_kwargs.temperature`` in its GiGPO example scripts), the default here.

Several ranks share the evaluation: rank r of W plays episodes r, r + W, ... and the per-episode table is
gathered on every rank (``distributed.episode_share``, ``gather_episodes``) before any metric is read off it, so
W ranks each spend 1/W of one evaluation, and a W-rank evaluation logs exactly the numbers of a 1-rank one (as
long as the policy's forward gives a row the same logits whatever rows share its batch, as the tiny policy's
does on a CPU; a GPU kernel chosen by batch size may change the last bits of a logit, and rarely a token).

``EvalCurve`` keeps the run's sampled success against env steps and gives the two primary metrics:

* ``eval/final``: the mean sampled success over the last ``trainer.final_window`` evaluations (3 by default;
  1 = the last evaluation alone, for a budget so short that the last three reach back to the start);
* ``eval/auc``: the area under the sampled success curve against env steps, divided by the env steps it
  spans (trapezoids from the first evaluation, at step 0, to the last): the mean success over the run's own
  span, in [0, 1]. Runs of one iteration budget may span different env steps (episodes end sooner as a policy
  learns), so each is normalised by its own span.

With ``rollout.eval_greedy=true`` the curve, and so both metrics, are of the greedy evaluation.
"""

from __future__ import annotations

from gigpo_lab.rollout.held_out import table_metrics
from gigpo_lab.training.distributed import episode_share, gather_episodes, world_of
from gigpo_lab.training.schema import TrainerConfig  # eval/final's window: its default and bound
from gigpo_lab.training.seeds import eval_seeds, eval_streams


class EvalCurve:
    """The (env steps, sampled success) points of a run's evaluations, checkpointed with the module.

    Args:
        window: how many of the last evaluations ``eval/final`` averages (>= 1).
    """

    def __init__(self, window: int = TrainerConfig.final_window) -> None:
        if window < 1:
            raise ValueError(f"final_window={window} must be >= 1")
        self.window = window
        self.steps: list[float] = []
        self.success: list[float] = []

    def add(self, env_steps: float, success: float) -> dict[str, float]:
        """Record one evaluation; return ``eval/final`` and ``eval/auc`` of the curve so far. An evaluation at
        the env steps of the last one replaces it (a run resumed from a mid-iteration checkpoint, or a finished
        run extended, evaluates those weights again), so no point counts twice."""
        if self.steps and self.steps[-1] == float(env_steps):
            self.steps.pop()
            self.success.pop()
        self.steps.append(float(env_steps))
        self.success.append(float(success))
        return {"eval/final": self.final(), "eval/auc": self.auc()}

    def final(self) -> float:
        """The mean success of the last ``window`` evaluations (fewer, early in a run)."""
        last = self.success[-self.window :]
        return sum(last) / len(last)

    def auc(self) -> float:
        """Trapezoid area under success against env steps over the steps spanned (one point: its value)."""
        span = self.steps[-1] - self.steps[0]
        if span <= 0:
            return self.success[-1]
        area = sum(
            (x1 - x0) * (y0 + y1) / 2
            for x0, x1, y0, y1 in zip(
                self.steps, self.steps[1:], self.success, self.success[1:], strict=False
            )
        )
        return area / span

    def state(self) -> dict:
        return {"steps": list(self.steps), "success": list(self.success)}

    def load(self, state: dict) -> None:
        self.steps = [float(x) for x in state.get("steps", [])]
        self.success = [float(y) for y in state.get("success", [])]


def run_evaluation(
    collector,
    seed: int,
    episodes: int,
    greedy: bool,
    temperature: float,
    greedy_episodes: int,
    strategy=None,
) -> dict[str, float]:
    """One evaluation: ``episodes`` held-out episodes, greedy or sampled at ``temperature``
    (``eval/success_rate``, ``eval/return``, ...); when sampled, also ``greedy_episodes`` greedy ones
    (``eval/greedy_success_rate``; 0 = none). ``strategy``: the Lightning strategy of a multi-process run, whose
    ranks share the episodes (a collective: call on every rank); None = one process plays them all."""
    result = _play(collector, seed, episodes, greedy, temperature, strategy)
    if greedy:
        result["eval/greedy_success_rate"] = result["eval/success_rate"]
    elif greedy_episodes > 0:
        greedy_run = _play(collector, seed, greedy_episodes, True, None, strategy)
        result["eval/greedy_success_rate"] = greedy_run["eval/success_rate"]
    return result


def _play(collector, seed: int, episodes: int, greedy: bool, temperature, strategy) -> dict[str, float]:
    """This rank's share of ``episodes`` held-out episodes, each sampled from its own stream (greedy: none), the
    shares gathered, and the metrics of the whole table."""
    mine = episode_share(episodes, *world_of(strategy))
    seeds = eval_seeds(episodes)
    streams = None if greedy else eval_streams(seed, mine)
    local = collector.held_out([seeds[i] for i in mine], streams, greedy=greedy, temperature=temperature)
    return table_metrics(gather_episodes(local, episodes, strategy))
