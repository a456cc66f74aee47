"""The in-sandbox runner of process languages (envs/process_runner.py): what it keeps of a run's output."""

from __future__ import annotations

import io

from envs.process_runner import OBSERVE, TAIL, _read_output


def test_a_long_output_is_kept_from_its_first_whole_line() -> None:
    """A mined Java task's statement quoted javac as `rror: constructor DefaultParser ...`: the kept end of
    a long build output began inside a line. The end kept now starts at a line, and is the output's end."""
    lines = [
        f"src/T.java:{n}: error: constructor DefaultParser cannot be applied\n".encode() for n in range(200)
    ]
    text = b"".join(lines)
    assert len(text) > TAIL
    kept, observed = _read_output(io.BytesIO(text))
    assert kept.startswith("src/T.java:") and text.decode().endswith(kept)
    assert len(kept) > TAIL - len(lines[0]) and observed == []


def test_a_short_output_is_kept_whole_with_what_it_observed() -> None:
    text = b"a line\n" + OBSERVE + b'3 "x"\n' + b"done, no line end"
    kept, observed = _read_output(io.BytesIO(text))
    assert kept == text.decode() and observed == ['3 "x"']
