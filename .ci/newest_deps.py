"""The project's dependencies for the newest-Python check (`make test-newest`), without torch.

CPU builds of torch exist on this kind of machine for Python 3.11 only (a local file); the index's torch
for 3.12 and 3.13 is the multi-GB CUDA build. So the newest Python runs the tests that need no torch, with
every other dependency as pyproject.toml pins it, plus the test runner. Prints one requirement per line.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

WITHOUT = ("torch",)
RUNNER = ["pytest>=8", "pytest-timeout>=2.3", "pytest-xdist>=3.6"]

project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
for requirement in [*project["dependencies"], *RUNNER]:
    name = requirement.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip()
    if name not in WITHOUT:
        print(requirement)
