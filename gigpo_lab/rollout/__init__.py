"""Rollout: engines that sample responses, and the collector that turns env episodes into a StepBatch."""

from gigpo_lab.rollout.engine import Engine, GenerationOutput, SamplingParams
from gigpo_lab.rollout.torch_engine import TorchEngine, build_torch_engine

__all__ = ["Engine", "GenerationOutput", "SamplingParams", "TorchEngine", "build_torch_engine"]
