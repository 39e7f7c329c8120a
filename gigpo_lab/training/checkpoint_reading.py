"""Reading a checkpoint file safely (tensors and plain containers only), and the MLflow run id a resumed run
continues."""

from __future__ import annotations

from pathlib import Path


def checkpoint_run_id(ckpt_path: str | None) -> str | None:
    """The MLflow run id stored in a checkpoint, so a resumed run continues the same MLflow run."""
    if not ckpt_path:
        return None
    path = Path(ckpt_path)
    if not path.is_file():
        raise FileNotFoundError(
            f"ckpt_path={ckpt_path} does not exist; pass a checkpoint such as <output_dir>/checkpoints/last.ckpt"
        )
    state = load_checkpoint_safely(path)
    return state.get("gigpo_lab", {}).get("mlflow_run_id")


def load_checkpoint_safely(path: str | Path) -> dict:
    """``torch.load(path, weights_only=True)``: tensors and plain containers only, never arbitrary objects.

    A checkpoint that holds other pickled objects (which could run code while loading) is refused with a
    clear error, as is a file that is not a checkpoint (truncated, or something else).
    """
    import pickle

    import torch

    try:
        # mmap: tensors are read only when touched, so reading the run id off a large checkpoint costs little
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as err:
        if "weights only" not in str(err).lower():  # not a torch checkpoint at all (e.g. invalid load key)
            raise ValueError(
                f"ckpt_path={path} is not a readable checkpoint (UnpicklingError: {str(err)[:200]}); pass "
                "another one, e.g. an earlier <output_dir>/checkpoints/iterNNNN.ckpt"
            ) from err
        lines = [ln.strip() for ln in str(err).splitlines() if "unsupported global" in ln.lower()]
        what = lines[0] if lines else "an object outside the allowed types"
        raise ValueError(
            f"ckpt_path={path} holds pickled objects other than tensors and plain containers, which could run "
            f"code when loaded, so it is refused ({what[:200]}); resume only from checkpoints gigpo-lab wrote"
        ) from err
    except Exception as err:  # truncated zip, a file of another format, …: torch raises several types
        raise ValueError(
            f"ckpt_path={path} is not a readable checkpoint ({type(err).__name__}: {str(err)[:200]}); pass "
            "another one, e.g. an earlier <output_dir>/checkpoints/iterNNNN.ckpt"
        ) from err
