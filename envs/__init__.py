"""Sandboxes, grading, the reward and the Gymnasium env. `envs.CodingEnv` loads on first use."""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "CodingEnv":  # Gymnasium and NumPy load only for users of the env
        from envs.gym_env import CodingEnv

        return CodingEnv
    raise AttributeError(f"module 'envs' has no attribute {name!r}")
