"""Asks a repository's PEP 517 build backend what the project depends on, as pip does before it installs.

Runs inside a sandbox with no network, in /repo, as `python3 -I -S -B metadata_probe.py SPEC.json`: no
site-packages of the sandbox's Python, only the folders the spec names (the build requirements, then the
`packaging` this probe reads markers with), whose path files are read as pip's isolated build reads them.
Standard library only, besides `packaging`.

SPEC.json: {"mode": "requires" | "metadata", "backend": "module:object", "backend_path": [...],
"paths": [...], "out": folder, "result": file}.

- requires: the backend's `get_requires_for_build_wheel` (a setup.py's `setup_requires`, a dynamic
  backend's extra needs): {"requires": [...]}.
- metadata: `prepare_metadata_for_build_wheel`, else `build_wheel` and the wheel's METADATA. Markers are
  evaluated here, by the Python the task runs with: {"name", "version", "requires": the requirements
  without an extra, "extras": extra -> its requirements}, markers left out.

A backend that fails exits non-zero with its traceback on stderr: the host falls back to the static parse.
"""

from __future__ import annotations

import email.parser
import importlib
import json
import os
import re
import site
import sys
import zipfile
from pathlib import Path
from typing import Any


def load_backend(name: str, backend_path: list[str]) -> Any:
    """The backend object PEP 517 names `module:object.attr`; `backend-path` folders of the repository
    come first on sys.path."""
    module, _, attrs = name.partition(":")
    sys.path[:0] = [os.path.join(os.getcwd(), folder) for folder in backend_path]
    found: Any = importlib.import_module(module.strip())
    for attr in attrs.strip().split(".") if attrs.strip() else []:
        found = getattr(found, attr)
    return found


def metadata_text(backend: Any, out: str) -> str:
    """The METADATA the backend writes for a wheel (PEP 517: `prepare_metadata_for_build_wheel` is
    optional; without it, the wheel is built and its METADATA read)."""
    prepare = getattr(backend, "prepare_metadata_for_build_wheel", None)
    if prepare is not None:
        return Path(out, prepare(out, {}), "METADATA").read_text(encoding="utf-8")
    wheel = backend.build_wheel(out, {})
    with zipfile.ZipFile(Path(out, wheel)) as archive:
        names = [n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        return archive.read(names[0]).decode("utf-8")


def dependencies(text: str) -> dict[str, Any]:
    """Name, version, the requirements without an extra and those of each extra, markers evaluated."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    message = email.parser.Parser().parsestr(text, headersonly=True)
    extras: dict[str, list[str]] = {canonicalize_name(e): [] for e in message.get_all("Provides-Extra") or []}
    base: list[str] = []
    for line in message.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        marker, requirement.marker = requirement.marker, None
        if marker is None or marker.evaluate({"extra": ""}):
            base.append(str(requirement))
            continue
        for extra, listed in extras.items():
            if marker.evaluate({"extra": extra}):
                listed.append(str(requirement))
    return {"name": message["Name"], "version": message["Version"], "requires": base, "extras": extras}


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    for folder in spec["paths"]:
        site.addsitedir(folder)
    backend = load_backend(spec["backend"], spec["backend_path"])
    if spec["mode"] == "requires":
        hook = getattr(backend, "get_requires_for_build_wheel", None)
        result: dict[str, Any] = {"requires": list(hook({})) if hook is not None else []}
    else:
        os.makedirs(spec["out"], exist_ok=True)
        result = dependencies(metadata_text(backend, spec["out"]))
    Path(spec["result"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
