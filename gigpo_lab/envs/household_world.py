"""The Household world: receptacles, objects, goals, commands and their effects (no text rendering).

In the spirit of ALFWorld (Shridhar et al., 2021), but small and generated from a seed. The
universe is fixed, so the command set and the vocabulary are fixed too:

- receptacles: cabinet, countertop, drawer, fridge, microwave, shelf, sink; cabinet, drawer, fridge
  and microwave can be opened and closed and start closed;
- objects: apple, bowl, bread, egg, mug, plate, potato; the agent carries at most one;
- tasks: ``place`` ("put a mug in the drawer"), ``clean`` (clean it with the sink first), ``heat``
  (with the microwave) and ``cool`` (with the fridge), as ALFWorld's pick-and-place family.

A world holds one goal, a few receptacles (those the goal needs plus random others), the goal
object and a few distractor objects. The state is the agent's location, the open receptacles,
where each object is, and each object's flags (clean, hot, cool).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: name -> (preposition used by "put", can be opened)
RECEPTACLES: dict[str, tuple[str, bool]] = {
    "cabinet": ("in", True),
    "countertop": ("on", False),
    "drawer": ("in", True),
    "fridge": ("in", True),
    "microwave": ("in", True),
    "shelf": ("on", False),
    "sink": ("in", False),
}
OBJECTS: tuple[str, ...] = ("apple", "bowl", "bread", "egg", "mug", "plate", "potato")

#: task -> (tool receptacle, verb, flag it sets); ``place`` needs no tool.
TASKS: dict[str, tuple[str, str, str] | None] = {
    "place": None,
    "clean": ("sink", "clean", "clean"),
    "heat": ("microwave", "heat", "hot"),
    "cool": ("fridge", "cool", "cool"),
}
#: Where a goal may ask to put the object.
GOAL_TARGETS: tuple[str, ...] = ("cabinet", "countertop", "drawer", "fridge", "microwave", "shelf")
#: The agent's location before its first "go to".
START = "room"
#: The location of a carried object.
HAND = "hand"


@dataclass(frozen=True)
class Command:
    """One text command: ``verb`` in look/inventory/go/open/close/take/put/clean/heat/cool."""

    name: str
    verb: str
    obj: str | None = None
    rec: str | None = None


def all_commands() -> tuple[Command, ...]:
    """The fixed command universe (the Discrete action space of the Household env), in a fixed order."""
    cmds = [Command("look", "look"), Command("inventory", "inventory")]
    cmds += [Command(f"go to {r}", "go", rec=r) for r in RECEPTACLES]
    cmds += [Command(f"open {r}", "open", rec=r) for r, (_, openable) in RECEPTACLES.items() if openable]
    cmds += [Command(f"close {r}", "close", rec=r) for r, (_, openable) in RECEPTACLES.items() if openable]
    cmds += [Command(f"take {o} from {r}", "take", o, r) for o in OBJECTS for r in RECEPTACLES]
    cmds += [
        Command(f"put {o} {prep} {r}", "put", o, r) for o in OBJECTS for r, (prep, _) in RECEPTACLES.items()
    ]
    for tool, verb, _ in (t for t in TASKS.values() if t is not None):
        cmds += [Command(f"{verb} {o} with {tool}", verb, o, tool) for o in OBJECTS]
    return tuple(cmds)


@dataclass
class World:
    """One episode's world: the goal (fixed) and the state (changed by :meth:`apply`)."""

    task: str
    goal_obj: str
    goal_rec: str
    receptacles: tuple[str, ...]
    location: str = START
    opened: set[str] = field(default_factory=set)
    where: dict[str, str] = field(default_factory=dict)
    flags: dict[str, set[str]] = field(default_factory=dict)

    # --- queries ------------------------------------------------------------------------------------
    def goal_flag(self) -> str | None:
        spec = TASKS[self.task]
        return spec[2] if spec else None

    def is_open(self, rec: str) -> bool:
        """Whether ``rec``'s contents are reachable (it is open or cannot be closed)."""
        return not RECEPTACLES[rec][1] or rec in self.opened

    def holding(self) -> str | None:
        return next((o for o, at in self.where.items() if at == HAND), None)

    def contents(self, rec: str) -> list[str]:
        return sorted(o for o, at in self.where.items() if at == rec)

    def success(self) -> bool:
        flag = self.goal_flag()
        return self.where[self.goal_obj] == self.goal_rec and (
            flag is None or flag in self.flags[self.goal_obj]
        )

    def admissible(self, cmd: Command) -> bool:
        """Whether ``cmd`` can be executed in the current state."""
        here, held = self.location, self.holding()
        if cmd.rec is not None and cmd.rec not in self.receptacles:
            return False
        if cmd.verb in ("look", "inventory"):
            return True
        if cmd.verb == "go":
            return cmd.rec != here
        if cmd.rec != here:
            return False
        if cmd.verb == "open":
            return cmd.rec not in self.opened
        if cmd.verb == "close":
            return cmd.rec in self.opened
        if cmd.verb == "take":
            return held is None and self.is_open(here) and self.where.get(cmd.obj) == here
        if cmd.verb == "put":
            return held == cmd.obj and self.is_open(here)
        return held == cmd.obj  # clean / heat / cool with the tool at hand

    # --- the transition -----------------------------------------------------------------------------
    def apply(self, cmd: Command) -> None:
        """Execute an admissible command (the caller checks :meth:`admissible` first)."""
        if cmd.verb == "go":
            self.location = cmd.rec
        elif cmd.verb == "open":
            self.opened.add(cmd.rec)
        elif cmd.verb == "close":
            self.opened.discard(cmd.rec)
        elif cmd.verb == "take":
            self.where[cmd.obj] = HAND
        elif cmd.verb == "put":
            self.where[cmd.obj] = cmd.rec
        elif cmd.verb in ("clean", "heat", "cool"):
            flags = self.flags[cmd.obj]
            flags.add({"clean": "clean", "heat": "hot", "cool": "cool"}[cmd.verb])
            if cmd.verb == "heat":
                flags.discard("cool")
            elif cmd.verb == "cool":
                flags.discard("hot")


def generate_world(
    rng: np.random.Generator,
    num_receptacles: int,
    num_distractors: int,
    task_types: tuple[str, ...] = tuple(TASKS),
) -> World:
    """A random world: a goal, the receptacles it needs plus random others, and the objects placed.

    Args:
        rng: the only source of randomness (a seed gives one world).
        num_receptacles: receptacles in the room (2 to 7; the goal's target and tool are always in).
        num_distractors: objects besides the goal object (0 to 6), each in a random receptacle.
        task_types: the tasks to draw from (a subset of ``place, clean, heat, cool``).
    """
    task = task_types[int(rng.integers(len(task_types)))]
    goal_obj = OBJECTS[int(rng.integers(len(OBJECTS)))]
    tool = TASKS[task][0] if TASKS[task] else None
    targets = [r for r in GOAL_TARGETS if r != tool]
    goal_rec = targets[int(rng.integers(len(targets)))]
    needed = [goal_rec] + ([tool] if tool else [])
    others = [r for r in RECEPTACLES if r not in needed]
    others = [others[i] for i in rng.permutation(len(others))]
    receptacles = tuple(sorted(needed + others[: max(0, num_receptacles - len(needed))]))
    world = World(task=task, goal_obj=goal_obj, goal_rec=goal_rec, receptacles=receptacles)
    starts = [r for r in receptacles if r != goal_rec]
    world.where[goal_obj] = starts[int(rng.integers(len(starts)))]
    pool = [o for o in OBJECTS if o != goal_obj]
    for i in rng.permutation(len(pool))[:num_distractors]:
        world.where[pool[i]] = receptacles[int(rng.integers(len(receptacles)))]
    world.flags = {o: set() for o in world.where}
    return world
