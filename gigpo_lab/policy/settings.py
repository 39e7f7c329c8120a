"""The choices and settings the ``model`` options take, importable without torch: the tiny policy's prompt
sources, a Hugging Face policy's dtypes, and ``LoraSettings``. The builders (``builders.py``) and the policies
(``tiny.py``, ``hf.py``, ``lora.py``) all import them from here, so none imports another in a loop."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: What the tiny policy's prompt shows (``prompt_source``): the compact anchor or the observation text.
PROMPT_SOURCES = ("anchor", "observation")
#: Parameter dtypes of a Hugging Face policy (``dtype``).
DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class LoraSettings:
    """LoRA adapters through peft: with them on, only the adapters train and the KL reference is the base
    model (adapters disabled, no copy). The schema of ``model.lora`` (``gigpo_lab/policy/schema.py``) and
    what ``build_hf_policy`` takes: each default is written here once."""

    #: Wrap the model in LoRA adapters; false = every weight trains.
    enabled: bool = False
    #: Adapter rank, >= 1.
    r: int = 8
    #: Scale numerator: the update is (alpha / r) B A.
    alpha: int = 16
    #: Dropout on the adapters' input while training, in [0, 1).
    dropout: float = 0.0
    #: Modules to adapt: all-linear (every linear layer but the head) or a list, e.g. [q_proj, v_proj].
    target_modules: Any = "all-linear"
    #: Seed of the adapters' A matrices (B starts at 0; the global RNG is left untouched); in the config the
    #: run seed.
    seed: int = 0

    @classmethod
    def from_config(cls, lora: Mapping | None) -> LoraSettings:
        """From the config node (None = disabled); unknown keys are refused with the valid ones listed."""
        if lora is None:
            return cls()
        data = dict(lora)
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(
                f"model.lora has unknown keys {sorted(unknown)}; valid: {list(cls.__dataclass_fields__)}"
            )
        settings = cls(**data)
        if settings.enabled and settings.r < 1:
            raise ValueError(f"model.lora.r={settings.r} must be >= 1")
        if not 0.0 <= settings.dropout < 1.0:
            raise ValueError(f"model.lora.dropout={settings.dropout} must be in [0, 1)")
        return settings

    def as_dict(self) -> dict[str, Any]:
        target = self.target_modules
        if not isinstance(target, str):
            target = list(target)
        return {**self.__dict__, "target_modules": target}
