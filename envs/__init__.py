"""Sandboxes, grading and the reward. The Gymnasium env built on them is `harness.gym.CodingEnv`."""
