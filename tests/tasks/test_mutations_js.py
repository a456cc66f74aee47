"""The JavaScript / TypeScript mutation operators (`tasks/mutations_js.py`): each slip on JS and TS text,
strings, template literals, regular expressions and comments left alone, and each inverse the text itself."""

from __future__ import annotations

from tasks.mutations_js import find_mutations, tokenize
from tasks.synth_programs import bug_edit

JS = """"use strict";
// if (a < b) return a; in a comment
const RE = /a < b|c\\/d[/]/g;

/** The whole numbers from lo up to hi. */
function span(lo, hi) {
  if (hi < lo) return [];
  const label = `from ${lo < hi ? "lo < hi" : `x ${hi >= 2}`} to`;
  const out = [];
  for (let n = lo; n <= hi; n++) out.push(n);
  return out;
}

const inside = (n, lo, hi) => n >= lo && n <= hi;
"""
TS = """/* a > b */
export class Box<T> {
  private items: Array<T> = [];

  get(i: number): T | undefined {
    if (i === -1) {
      throw new RangeError("i < 0");
    } else if (i > 0) {
      return this.items[i - 1];
    } else {
      return this.items[0];
    }
  }
}
"""


def mutations(path: str, text: str) -> list[tuple[str, str, str, str]]:
    """(operator, function, old text, new text) of every mutation."""
    return [
        (m.operator, m.function, text[m.start : m.end], m.replacement) for m in find_mutations(path, text)
    ]


def test_javascript_operators_leave_strings_templates_regexes_and_comments_alone() -> None:
    found = mutations("src/span.js", JS)
    assert ("removed_guard", "span", "  if (hi < lo) return [];\n", "") in found
    assert ("flipped_comparison", "span", "<", "<=") in found  # hi < lo
    assert ("flipped_comparison", "span", "<=", "<") in found  # n <= hi
    assert ("swapped_logic", "inside", "&&", "||") in found
    assert ("flipped_comparison", "inside", ">=", ">") in found
    # one `<` in span's code (hi < lo); the template's, the regex's, the string's and the comment's stay
    assert sum(1 for f in found if f[0] == "flipped_comparison" and f[2] == "<") == 1
    assert not any(f[1] == "" or f[1] is None for f in found)


def test_typescript_operators_skip_type_arguments() -> None:
    found = mutations("src/box.ts", TS)
    ops = {(op, old, new) for op, function, old, new in found if function == "Box.get"}
    assert ("flipped_comparison", "===", "!==") in ops and ("flipped_comparison", ">", ">=") in ops
    assert ("off_by_one", "-1", "0") in ops and ("off_by_one", "-1", "-2") in ops  # unary minus
    assert ("off_by_one", " - 1", "") in ops  # `i - 1` becomes `i`
    assert ("off_by_one", "0", "1") in ops  # the index
    dropped = [old for op, old, _ in ops if op == "dropped_branch"]
    assert any(old.startswith(" else if (i > 0) {") for old in dropped)
    assert any(old.startswith(" else {") for old in dropped)
    assert not any("Array" in old or "<T>" in old for _, _, old, _ in found)
    assert not any(op == "removed_guard" for op, _, _ in ops)  # the throw has an else


def test_the_inverse_of_every_edit_restores_the_text() -> None:
    for path, text in (("src/span.js", JS), ("src/box.ts", TS)):
        for mutation in find_mutations(path, text):
            edit = bug_edit(path, text, mutation)
            assert text.count(edit.old) == 1
            mutated = text.replace(edit.old, edit.new)
            assert mutated == mutation.apply(text) and mutated != text
            start = mutated.index(edit.new) if edit.new else text.index(edit.old)
            assert mutated[:start] + edit.old + mutated[start + len(edit.new) :] == text  # the inverse
            assert len(edit.old.splitlines()) <= 4, edit  # a small diff


def test_tokens_keep_literals_whole() -> None:
    kinds = [(t.kind, t.text) for t in tokenize('x = a / b / c; y = "/" + `${a / 2}` + /=\\//.source;')]
    assert ("regex", "/=\\//") in kinds and ("template", "`${a / 2}`") in kinds and ("string", '"/"') in kinds
    assert [t for k, t in kinds if k == "punct" and t == "/"] == ["/", "/"]


def test_mutations_outside_functions_are_not_made() -> None:
    text = "const LIMIT = 3 < 4;\nif (LIMIT) throw new Error('x');\n"
    assert find_mutations("a.js", text) == []
