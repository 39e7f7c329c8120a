"""Exploration bonuses added to the step rewards before the estimators see them (the ``exploration`` group).

``exploration=count`` (the default) adds a count-based novelty bonus to every step row::

    r'_t = r_t + beta_c / sqrt(N(s_{t+1}))   (with first_visit: only when s_{t+1} is new to this episode)

where ``beta_c = beta * max(0, 1 - progress)`` and ``progress`` is how far the run is through its budget
when collection c starts: ``c / anneal`` (collections, default ``trainer.iterations``) or ``steps /
anneal_env_steps`` (step rows counted so far, default ``trainer.max_env_steps``), whichever is further. So
the bonus fades to 0 by the end of the run, whichever budget ends it. ``exploration=none`` leaves the rewards
alone.

``s_{t+1}`` is the env's anchor after the step (``info["anchor"]``: the raw state, the key GiGPO's step
groups already use), and ``N`` counts every step row that arrived in it over the whole run so far, this
iteration's rows included (so ``N >= 1``). The counts are updated once per collection, before the bonus is
computed, and are checkpointed with the module, so a resumed run continues with the same counts.

This is the tabular count bonus of MBIE-EB (Strehl & Littman 2008, "An analysis of model-based interval
estimation for Markov decision processes", JCSS 74(8)), which uses ``beta / sqrt(N(s, a))``; counting the
*next* state instead follows the pseudo-count bonus of Bellemare et al. 2016 (arXiv 1606.01868) and
#Exploration (Tang et al. 2017, arXiv 1611.04717, ``beta / sqrt(n(phi(s)))``, counts updated with the batch
before the bonus). The next state, not (s, a), because an invalid word leaves the state where it was: under
a next-state count it earns the bonus of an old, much-visited state, while a new (s, invalid) pair would
earn a fresh one. The bonus knows nothing of the env beyond the anchor string.

``first_visit`` (on by default) pays the bonus only on a step that reaches a state this episode has not been
in (its reset state counts as visited). A bonus on every step makes any long episode pay: on FrozenLake 4x4 a
seed learned to avoid the holes and wander until the turn limit, never reaching the goal, because ending the
episode (in the goal too) stopped the bonus (docs/WHY_RUNS_FAIL.md). Paid once per state and episode, a
loop or an invalid word earns nothing, so only reaching new ground does; this is the episodic-novelty gate of
Never Give Up (Badia et al. 2020, arXiv 2002.06038) on top of the lifelong count.

``own_advantage`` keeps the bonus out of the rewards. It becomes a second advantage stream, normalised on its
own, in the manner of the separate intrinsic value stream of RND (Burda et al. 2018, arXiv 1810.12894)::

    b_t    = first_visit_t / sqrt(N(s_{t+1}))                    (the bonus with beta = 1)
    B_t    = b_t + gamma * B_{t+1}                                the discounted bonus-to-go of its trajectory
    A_int  = (B - mean_batch(B)) / (std_batch(B) + 1e-6)         whitened over every row of the batch
    A_i    = A_estimator,i + beta_c * s * A_int,i,    s = max(std_batch(A_estimator), dose_floor)

``s`` makes the dose equal (``relative_dose``, on by default): the stream's spread is ``beta_c`` times the
estimator's own spread on the same batch, whatever the estimator's scale, so ``adv/stream_ratio``, the std
of the stream over the std of the estimator's own advantages, is ``beta_c`` for every estimator. With the
stream at a fixed std ``beta_c`` (``relative_dose=false``, the design before issue #45) the dose was
measured at 0.5x to 2.1x each estimator's own signal: REINFORCE++ whitens its advantages to std 1, GRPO's
mean-only advantages on 0/1 rewards spread about 0.1-0.3. The floor keeps the stream alive in a batch where
the estimator's own advantages are all 0 (no group saw a success): every estimator then gets the same
``beta_c * dose_floor * A_int``.

The stream uses no group of any estimator: no episode group, no anchor-state step group, only each
trajectory's own future and one mean and std over the whole batch (REINFORCE with a constant baseline on
the bonus, whitened as REINFORCE++ whitens). So the same batch adds the same per-row stream to every
estimator's advantages, whichever estimator runs (docs/ALGORITHMS.md, "The recipe around the estimators").
The estimator sees the env's own rewards, exactly as with ``exploration=none``, and the exploration signal
has the same size whatever the env's reward scale. A bonus added to the rewards is about 0.5 on CliffWalking,
beside -1 a step and -100 a fall, and the estimator's advantages drown it (docs/WHY_RUNS_FAIL.md). A batch
in which every bonus-to-go is equal (all 0 once the map is known) gets 0.

Only the estimators see the bonus: ``rollout/success_rate`` and ``rollout/return`` stay the env's own. The
bonus is logged as ``rollout/novelty_bonus`` (mean per step row), ``rollout/distinct_states`` (states
counted so far), ``rollout/new_states`` (first seen this iteration), ``rollout/novelty_beta`` (the
iteration's annealed beta) and, with ``own_advantage``, ``rollout/intrinsic_adv_abs`` (the mean |beta_c *
A_int| per row). Several ranks count separately.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.grouping import group_normalize
from gigpo_lab.algorithm.prepare import prepare_rows
from gigpo_lab.algorithm.returns import discounted_returns
from gigpo_lab.algorithm.settings import Configured, param
from gigpo_lab.batch import StepBatch

#: The columns the intrinsic stream reads: a trajectory's rows in time order, nothing of any grouping.
_STREAM_COLUMNS = ("rewards", "group_ids", "traj_ids", "step_ids")


def state_key(anchor: str) -> str:
    """A short stable key of an anchor string (16 hex digits of BLAKE2b): a compact checkpoint, the same in
    every process (Python's ``hash`` of a str is salted per process)."""
    return hashlib.blake2b(anchor.encode("utf-8"), digest_size=8).hexdigest()


@dataclass
class ExplorationOutput:
    """What an exploration bonus returns for one collected batch of N rows.

    metrics: ``rollout/...`` diagnostics, plain floats.
    intrinsic_advantages: (N,) float64, ``beta_c * A_int`` per row (``own_advantage``), or None when the bonus
        went into ``batch.rewards`` (or there is none).
    dose_floor: None = the stream is added as it is; a float = it is scaled by the std of the estimator's
        own advantages, at least this (``relative_dose``, module docstring).
    """

    metrics: dict[str, float] = field(default_factory=dict)
    intrinsic_advantages: torch.Tensor | None = None
    dose_floor: float | None = None

    def stream(self, advantages: torch.Tensor) -> torch.Tensor | None:
        """The stream (N,) float64 added to the estimator's advantages (N,), or None when there is none."""
        if self.intrinsic_advantages is None:
            return None
        if self.dose_floor is None:
            return self.intrinsic_advantages
        return self.intrinsic_advantages * max(_spread(advantages), self.dose_floor)

    def add_to(self, advantages: torch.Tensor) -> torch.Tensor:
        """The estimator's advantages (N,) plus the intrinsic stream, in their dtype (the same tensor when there
        is no stream)."""
        stream = self.stream(advantages)
        if stream is None:
            return advantages
        return (advantages.double() + stream).to(advantages.dtype)

    def dose(self, advantages: torch.Tensor) -> dict[str, float]:
        """``adv/stream_ratio``: std(stream) / std(the estimator's own advantages (N,)), and ``adv/own_std``;
        the ratio only where both are defined (a stream, and own advantages that are not all equal)."""
        stream = self.stream(advantages)
        if stream is None:
            return {}
        own = _spread(advantages)
        metrics = {"adv/own_std": own}
        if own > 0:
            metrics["adv/stream_ratio"] = _spread(stream) / own
        return metrics


def _spread(values: torch.Tensor) -> float:
    """The unbiased std of (N,) values in float64, as the stream is whitened; 0 for fewer than two."""
    return float(values.double().std()) if values.numel() > 1 else 0.0


@dataclass
class NoExplorationConfig:
    """No exploration bonus: the estimators see the env's rewards."""

    _target_: str = "gigpo_lab.algorithm.exploration.NoBonus"


class NoBonus:
    """``exploration=none``: the rewards are left as the env paid them; no metrics, no state."""

    def __call__(self, batch: StepBatch) -> ExplorationOutput:
        return ExplorationOutput()

    def state(self) -> dict:
        return {}

    def load(self, state: dict) -> None:
        pass


@dataclass
class CountBonusConfig:
    """A count-based novelty bonus beta / sqrt(N(s')) on every step's reward (``gigpo_lab/algorithm/exploration.py``)."""

    _target_: str = "gigpo_lab.algorithm.exploration.CountBonus"
    #: The bonus of a state seen once; N(s') counts every arrival in the anchor s' over the whole run.
    #: 0.5 is the value measured in docs/WHY_RUNS_FAIL.md.
    beta: float = param(0.5, low=0.0)
    #: true = pay the bonus only on a step into a state new to its episode (no pay for loops, invalid words or
    #: a long episode as such); false = on every step.
    first_visit: bool = True
    #: The annealing clock in collections (one per iteration): beta falls linearly to 0 at collection K and
    #: stays 0 after it; 0 = no such clock (exploration=count sets the run's trainer.iterations). With both
    #: clocks 0/null, beta is constant. A run resumed with a larger trainer.iterations anneals over the new length.
    anneal: int = param(0, low=0)
    #: The clock in env steps: beta has fallen to 0 once this many step rows were collected; null or 0 = no
    #: such clock (exploration=count sets the run's trainer.max_env_steps; the earlier of the two clocks wins).
    #: Each rank counts only its own rows, so a run on W ranks with a step budget should set it to
    #: trainer.max_env_steps / W.
    anneal_env_steps: Optional[int] = param(None, low=0)  # noqa: UP045
    #: true = the bonus is its own advantage stream: the rewards stay the env's, each row's discounted
    #: bonus-to-go (gamma below) is whitened over the whole batch, and beta times that is added to the
    #: advantages of whichever estimator runs, the same per-row values for every estimator (no estimator's
    #: grouping enters it), so the exploration signal has one size whatever the env's reward scale.
    #: false = the bonus is added to the step rewards, which each estimator then processes its own way.
    own_advantage: bool = True
    #: gamma, the discount of the bonus-to-go in the stream (with own_advantage).
    gamma: float = param(0.95, low=0.0, high=1.0)
    #: true = (with own_advantage) the stream is scaled by the std of the estimator's own advantages on the
    #: batch, so its dose (adv/stream_ratio) is beta for every estimator; false = the stream has std beta
    #: whatever the estimator's own scale (0.5x to 2.1x the own signal, by estimator; issue #45).
    relative_dose: bool = True
    #: The least scale of a relative dose, used where the estimator's own advantages spread less (in
    #: practice, all 0: no group saw a success); every estimator then gets the same stream, beta_c * floor * A_int.
    dose_floor: float = param(0.01, low=0.0, low_open=True)


class CountBonus(Configured):
    """``beta / sqrt(N(s'))`` added to each step row's reward (module docstring).

    Parameters: ``CountBonusConfig``, one line each. With neither clock, ``beta`` is constant; otherwise
    collection c pays ``beta * max(0, 1 - progress)``, where progress is at least ``c / anneal`` and at least
    ``s / anneal_env_steps`` (``s`` the step rows of the earlier collections, this process's rows).
    """

    schema = CountBonusConfig
    owner = "exploration."

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        self.anneal_env_steps = self.anneal_env_steps or 0  # null = 0: no clock in env steps
        self.counts: dict[str, int] = {}
        self.collections = 0  # calls so far: the annealing clock in collections

    @property
    def env_steps(self) -> int:
        """Step rows counted so far (every row is counted once): the clock in env steps."""
        return sum(self.counts.values())

    def progress(self) -> float:
        """How far through its budget the run is at the next collection: 0 with no clock (class docstring)."""
        by_collections = self.collections / self.anneal if self.anneal else 0.0
        by_steps = self.env_steps / self.anneal_env_steps if self.anneal_env_steps else 0.0
        return max(by_collections, by_steps)

    def current_beta(self) -> float:
        """The ``beta`` of the next collection: ``beta * max(0, 1 - progress)`` (class docstring; exactly
        ``beta`` with no clock, where the progress is 0)."""
        return self.beta * max(0.0, 1.0 - self.progress())

    def count(self, next_anchors: Sequence[str]) -> tuple[torch.Tensor, int]:
        """Count the states ``next_anchors`` (one per row); return N (rows,) float64 after counting them all,
        and how many distinct states were new."""
        import torch

        keys = [state_key(a) for a in next_anchors]
        new = 0
        for k in keys:
            seen = self.counts.get(k, 0)
            new += seen == 0
            self.counts[k] = seen + 1
        return torch.tensor([self.counts[k] for k in keys], dtype=torch.float64), new

    def __call__(self, batch: StepBatch) -> ExplorationOutput:
        """Count the batch's next states and pay the bonus: added to ``batch.rewards`` (N,), or, with
        ``own_advantage``, returned as the output's ``intrinsic_advantages`` (N,) float64 (``add_to``).
        Needs ``next_anchor_texts`` (and, with ``first_visit``, ``traj_ids``, ``step_ids`` and
        ``anchor_texts``; with ``own_advantage``, ``group_ids``, ``traj_ids`` and ``step_ids``)."""
        import torch

        beta = self.current_beta()  # before counting this batch: its progress is the earlier collections'
        n, new = self.count(batch.next_anchor_texts)
        self.collections += 1
        visits = first_visits(batch) if self.first_visit else torch.ones_like(n)
        bonus = beta / n.sqrt() * visits
        metrics = {
            "rollout/novelty_bonus": bonus.mean().item() if len(bonus) else 0.0,
            "rollout/distinct_states": float(len(self.counts)),
            "rollout/new_states": float(new),
            "rollout/novelty_beta": beta,
        }
        if self.own_advantage:  # whitened, so the stream is computed from the beta = 1 bonus
            intrinsic = beta * intrinsic_advantages(visits / n.sqrt(), batch, self.gamma)
            metrics["rollout/intrinsic_adv_abs"] = intrinsic.abs().mean().item() if len(intrinsic) else 0.0
            return ExplorationOutput(metrics, intrinsic, self.dose_floor if self.relative_dose else None)
        batch.rewards = (batch.rewards.double() + bonus).to(batch.rewards.dtype)
        return ExplorationOutput(metrics)

    def state(self) -> dict:
        return {"counts": dict(self.counts), "collections": self.collections}

    def load(self, state: dict) -> None:
        self.counts = {str(k): int(v) for k, v in state.get("counts", {}).items()}
        self.collections = int(state.get("collections", 0))


def intrinsic_advantages(
    bonus: torch.Tensor, batch: StepBatch, gamma: float = CountBonusConfig.gamma
) -> torch.Tensor:
    """The intrinsic stream A_int (module docstring): each row's discounted bonus-to-go within its trajectory,
    whitened over the whole batch (unbiased std, eps 1e-6; a batch of one row gives 0).

    bonus: (N,) float64, the beta = 1 bonus of each row; ``batch`` gives ``traj_ids`` and ``step_ids`` (N,)
    (and ``group_ids``, which are only validated: no group enters the stream). Returns (N,) float64."""
    import torch

    rows = prepare_rows(
        "exploration",
        _STREAM_COLUMNS,
        (),
        {
            "rewards": bonus,
            "group_ids": batch.group_ids,
            "traj_ids": batch.traj_ids,
            "step_ids": batch.step_ids,
        },
    )
    to_go = discounted_returns(rows.rewards, rows.traj, rows.layout, gamma)
    whole_batch = torch.zeros_like(rows.traj)
    return group_normalize(to_go, whole_batch, 1, mode="mean_std_norm", eps=1e-6, singleton="zero")


def first_visits(batch: StepBatch) -> torch.Tensor:
    """(N,) float64: 1.0 on a row whose next anchor its trajectory had not been in before (the reset anchor
    and every earlier next anchor count as visited), else 0.0. Rows may come in any order."""
    import torch

    nxt, anchors = batch.next_anchor_texts, batch.anchor_texts
    traj, step = batch.traj_ids.tolist(), batch.step_ids.tolist()
    out = torch.zeros(len(nxt), dtype=torch.float64)
    seen: dict[int, set[str]] = {}
    for i in sorted(range(len(nxt)), key=lambda i: (traj[i], step[i])):
        visited = seen.setdefault(traj[i], set())
        if step[i] == 0:
            visited.add(anchors[i])
        if nxt[i] not in visited:
            out[i] = 1.0
            visited.add(nxt[i])
    return out


#: ``"exploration/<option>"`` -> schema (stored as ``schema/exploration/<option>``).
SCHEMAS: dict[str, type] = {"exploration/none": NoExplorationConfig, "exploration/count": CountBonusConfig}
