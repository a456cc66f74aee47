"""CI's own tools: `.ci/slowest.py` says where a run's test time went from pytest's JUnit reports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_slowest_sums_each_file_and_lists_the_slowest_tests_of_real_reports(tmp_path: Path) -> None:
    """Two real pytest runs' reports (a file of two tests, one sleeping; a class in another file), and one
    missing report: each file's summed time, the slowest test first, and the missing part named."""
    (tmp_path / "test_a.py").write_text(
        "import time\n\ndef test_slow():\n    time.sleep(0.3)\n\ndef test_quick():\n    pass\n"
    )
    (tmp_path / "test_b.py").write_text("class TestB:\n    def test_in_class(self):\n        pass\n")
    reports = []
    for name in ("test_a.py", "test_b.py"):
        report = tmp_path / f"{name}.xml"
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", name, f"--junitxml={report}"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
        reports.append(str(report))
    shown = subprocess.run(
        [sys.executable, str(ROOT / ".ci/slowest.py"), *reports, str(tmp_path / "gone.xml"), "--top", "5"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any("test_a.py.xml: 2 tests" in line for line in lines)
    assert any("gone.xml: missing" in line for line in lines)
    files = lines[lines.index(next(x for x in lines if "files that took longest" in x)) + 1 :][:2]
    assert files[0].split()[-1] == "test_a.py" and float(files[0].split()[0]) >= 0
    assert files[1].split()[-1] == "test_b.py"
    slowest = next(x for x in lines if "::" in x)
    assert slowest.strip().endswith("test_a.py::test_slow") and float(slowest.split()[0]) >= 0.3
