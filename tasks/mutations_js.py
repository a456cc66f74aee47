"""Small, realistic bugs in JavaScript and TypeScript functions: found on the tokens of the text (strings,
template literals, regular expressions and comments are single tokens, never changed), applied as minimal
edits of the text.

Five operators, the slips `tasks/mutations.py` makes in Python: a flipped comparison (`<` for `<=`, `===`
for `!==`; a `<` or `>` only with spaces around it, so a TypeScript type argument `Array<T>` is never
one), an off-by-one integer (beside arithmetic or a comparison, an index, an argument of `slice` and its
kin), `&&` and `||` swapped, a dropped `else` / `else if` block (braced), and a removed guard clause
(`if (...) return / throw / continue / break`, braced or not, on lines of its own, with no `else`, not
alone in its block). Only code inside a named function is changed (a function declaration, a method, a
function or arrow function assigned to a name), and the mutation names it (`Class.method`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

JsOperator = Literal["flipped_comparison", "off_by_one", "swapped_logic", "dropped_branch", "removed_guard"]
OPERATORS: tuple[JsOperator, ...] = get_args(JsOperator)

PUNCTUATORS = sorted(
    [">>>=", "===", "!==", "**=", "<<=", ">>=", ">>>", "...", "&&=", "||=", "??=", "=>", "==", "!=", "<=",
     ">=", "&&", "||", "??", "?.", "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "**", "<<",
     ">>", "{", "}", "(", ")", "[", "]", ";", ",", "<", ">", "+", "-", "*", "/", "%", "&", "|", "^", "!",
     "~", "?", ":", "=", ".", "@", "#"],
    key=len,
    reverse=True,
)  # fmt: skip
NAME = re.compile(r"#?[A-Za-z_$\u0080-\uffff][\w$\u0080-\uffff]*")
NUMBER = re.compile(r"0[xXoObB][\da-fA-F_]+n?|(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][+-]?\d+)?n?")
REGEX_AFTER = frozenset(
    {"return", "typeof", "instanceof", "in", "of", "new", "delete", "void", "throw", "case", "do", "else",
     "yield", "await"}
)  # fmt: skip
"""Keywords after which a `/` starts a regular expression, not a division."""
KEYWORDS = REGEX_AFTER - {"instanceof", "in", "of"} | {
    "if", "for", "while", "switch", "catch", "with", "function", "class", "const", "let", "var"
}  # fmt: skip
"""Words that are no operand and no function's name."""
FLIP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "===": "!==", "!==": "===", "==": "!=", "!=": "=="}
LOGIC = {"&&": "||", "||": "&&"}
ARITHMETIC = frozenset({"+", "-", "*", "/", "%", "<", "<=", ">", ">=", "===", "!==", "==", "!=", "+=", "-="})
SLICE_LIKE = frozenset({"slice", "substring", "substr", "splice", "at", "charAt", "padStart", "padEnd"})
EXITS = frozenset({"return", "throw", "continue", "break"})
OPERAND_END = frozenset({")", "]", "}"})


@dataclass(frozen=True)
class JsMutation:
    """One replacement of text[start:end] in one file, inside one named function."""

    path: str
    operator: JsOperator
    function: str
    start: int
    end: int
    replacement: str
    line: int
    """The 1-based line the mutation starts at."""

    def apply(self, text: str) -> str:
        return text[: self.start] + self.replacement + text[self.end :]


@dataclass(frozen=True)
class Token:
    kind: Literal["name", "number", "punct", "string", "template", "regex"]
    text: str
    start: int
    end: int
    first: bool
    """The first token of its line."""


def _quoted_end(text: str, i: int) -> int:
    """The index past the string literal that starts at `i` (its quote)."""
    quote, i = text[i], i + 1
    while i < len(text) and text[i] != quote and text[i] != "\n":
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _template_end(text: str, i: int) -> int:
    """The index past the template literal that starts at `i`, its `${...}` parts and nested ones included."""
    i += 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == "`":
            return i + 1
        elif text.startswith("${", i):
            depth, i = 1, i + 2
            while i < len(text) and depth:
                if text[i] in "'\"":
                    i = _quoted_end(text, i)
                    continue
                if text[i] == "`":
                    i = _template_end(text, i)
                    continue
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
        else:
            i += 1
    return len(text)


def _regex_end(text: str, i: int) -> int:
    """The index past the regular expression literal (and its flags) that starts at `i`."""
    i, in_class = i + 1, False
    while i < len(text) and text[i] != "\n":
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "[":
            in_class = True
        elif text[i] == "]":
            in_class = False
        elif text[i] == "/" and not in_class:
            i += 1
            while i < len(text) and (text[i].isalnum() or text[i] == "_"):
                i += 1
            return i
        i += 1
    return i


def _regex_may_start(previous: Token | None) -> bool:
    if previous is None:
        return True
    if previous.kind == "punct":
        return previous.text not in OPERAND_END
    return previous.kind == "name" and previous.text in REGEX_AFTER


def tokenize(text: str) -> list[Token]:
    """The tokens of JavaScript or TypeScript `text`, comments left out."""
    found: list[Token] = []
    i, first = (text.find("\n") if text.startswith("#!") else 0), True
    i = len(text) if i < 0 else i
    while i < len(text):
        c = text[i]
        if c.isspace():
            first = first or c == "\n"
            i += 1
            continue
        if text.startswith("//", i) or text.startswith("/*", i):
            end = text.find("\n", i) if text[i + 1] == "/" else text.find("*/", i + 2) + 2
            end = len(text) if end < (0 if text[i + 1] == "/" else 2) else end
            first = first or "\n" in text[i:end]
            i = end
            continue
        kind: Literal["name", "number", "punct", "string", "template", "regex"]
        if c in "'\"":
            kind, end = "string", _quoted_end(text, i)
        elif c == "`":
            kind, end = "template", _template_end(text, i)
        elif c == "/" and _regex_may_start(found[-1] if found else None):
            kind, end = "regex", _regex_end(text, i)
        elif (m := NUMBER.match(text, i)) is not None and (c.isdigit() or c == "."):
            kind, end = "number", m.end()
        elif (m := NAME.match(text, i)) is not None:
            kind, end = "name", m.end()
        else:
            punct = next((p for p in PUNCTUATORS if text.startswith(p, i)), c)
            kind, end = "punct", i + len(punct)
        found.append(Token(kind, text[i:end], i, end, first))
        first, i = False, end
    return found


class Code:
    """A file's tokens, their matching brackets, and the named function each token is in."""

    def __init__(self, path: str, text: str) -> None:
        self.path, self.text = path, text
        self.tokens = tokenize(text)
        self.match: dict[int, int] = {}
        stack: list[int] = []
        for k, token in enumerate(self.tokens):
            if token.kind == "punct" and token.text in "([{":
                stack.append(k)
            elif token.kind == "punct" and token.text in ")]}" and stack:
                opened = stack.pop()
                self.match[opened], self.match[k] = k, opened
        self.owner = self._owners()

    def is_(self, k: int, *texts: str) -> bool:
        return (
            0 <= k < len(self.tokens)
            and self.tokens[k].kind in ("punct", "name")
            and self.tokens[k].text in texts
        )

    def line(self, k: int) -> int:
        return self.text.count("\n", 0, self.tokens[k].start) + 1

    def _owners(self) -> list[str | None]:
        """For each token, the qualified name of the innermost named function it is in (None: none)."""
        owner: list[str | None] = [None] * len(self.tokens)
        spans: list[tuple[int, int, str, bool]] = []  # (first, last, name, a class)
        for k in range(len(self.tokens)):
            named = self._body_at(k)
            if named is not None:
                spans.append((k, named[0], named[1], named[2]))
        for first, last, name, is_class in sorted(spans, key=lambda s: s[1] - s[0], reverse=True):
            classes = [n for f, la, n, c in spans if c and f < first and last <= la]
            qualified = ".".join([*classes[-1:], name]) if not is_class else name
            for k in range(first, last + 1):
                owner[k] = qualified if not is_class else owner[k]
        return owner

    def _body_at(self, k: int) -> tuple[int, str, bool] | None:
        """(last token, name, whether a class body) of a named function's or class's body opening at `k`."""
        if self.is_(k, "{") and k in self.match:
            back = self._class_name(k)
            if back is not None:
                return self.match[k], back, True
            name = self._function_name(k)
            return (self.match[k], name, False) if name else None
        if self.is_(k - 1, "=>") and not self.is_(k, "{"):  # an arrow function's expression body
            name = self._arrow_name(k - 1)
            return (self._expression_end(k), name, False) if name else None
        return None

    def _class_name(self, k: int) -> str | None:
        for j in range(k - 1, max(k - 12, -1), -1):
            if self.is_(j, ";", "{", "}", "(", ")", "="):
                return None
            if self.is_(j, "class") and self.tokens[j + 1].kind == "name" and j + 1 < k:
                return self.tokens[j + 1].text
        return None

    def _params_end(self, k: int) -> int | None:
        """The `)` that closes the parameters of the body opening at `k` (past a return type)."""
        j = k - 1
        if self.is_(j, "=>"):
            j -= 1
        if self.is_(j, ")"):
            return j
        for m in range(j, max(j - 30, -1), -1):
            if self.is_(m, ";", "{", "}", "="):
                return None
            if self.is_(m, ")") and self.is_(m + 1, ":"):
                return m
        return None

    def _function_name(self, k: int) -> str | None:
        if self.is_(k - 1, "=>"):
            return self._arrow_name(k - 1)
        close = self._params_end(k)
        if close is None or close not in self.match:
            return None
        j = self.match[close] - 1
        if self.is_(j, "function"):
            return self._assigned_name(j)
        if self.is_(j - 1, "function") or self.is_(j - 2, "function"):  # `function f(`, `function* f(`
            return self.tokens[j].text if self.tokens[j].kind == "name" else None
        if j >= 0 and self.tokens[j].kind == "name" and self.tokens[j].text not in KEYWORDS:
            return self.tokens[j].text  # a method
        return None

    def _arrow_name(self, arrow: int) -> str | None:
        close = self._params_end(arrow + 1)
        start = self.match.get(close, arrow - 1) if close is not None else arrow - 1
        return self._assigned_name(start)

    def _assigned_name(self, k: int) -> str | None:
        """`NAME` of `NAME = <k>` or `NAME: <k>`, where the token at `k` starts a function."""
        if self.is_(k - 1, "async"):
            k -= 1
        if self.is_(k - 1, "=", ":") and k >= 2 and self.tokens[k - 2].kind in ("name", "string"):
            return self.tokens[k - 2].text.strip("'\"")
        return None

    def _expression_end(self, k: int) -> int:
        """The last token of the expression that starts at `k` (an arrow function's body)."""
        j = k
        while j < len(self.tokens):
            if self.is_(j, "(", "[", "{") and j in self.match:
                j = self.match[j] + 1
                continue
            if self.is_(j, ";", ",", ")", "]", "}") or (
                j > k and self.tokens[j].first and not self._continues(j)
            ):
                return j - 1
            j += 1
        return len(self.tokens) - 1

    def _continues(self, j: int) -> bool:
        """Whether the token at `j`, first on its line, continues the expression of the line before."""
        token, previous = self.tokens[j], self.tokens[j - 1]
        return (token.kind == "punct" and token.text not in "([{}") or (
            previous.kind == "punct" and previous.text not in OPERAND_END
        )


def find_mutations(path: str, text: str) -> list[JsMutation]:
    """Every mutation of the named functions in `text`."""
    code = Code(path, text)
    found: list[JsMutation] = []
    for k, token in enumerate(code.tokens):
        function = code.owner[k]
        if function is None:
            continue
        found += _operators(code, k, token, function)
    return found


def _operators(code: Code, k: int, token: Token, function: str) -> list[JsMutation]:
    def made(operator: JsOperator, start: int, end: int, replacement: str) -> JsMutation:
        return JsMutation(code.path, operator, function, start, end, replacement, code.line(k))

    if token.kind == "punct" and token.text in FLIP:
        spaced = (
            code.text[token.start - 1 : token.start].isspace()
            and code.text[token.end : token.end + 1].isspace()
        )
        if token.text in ("<", ">", "<=", ">=") and not spaced:
            return []
        return [made("flipped_comparison", token.start, token.end, FLIP[token.text])]
    if token.kind == "punct" and token.text in LOGIC:
        return [made("swapped_logic", token.start, token.end, LOGIC[token.text])]
    if token.kind == "number":
        return [made("off_by_one", *edit) for edit in _off_by_one(code, k)]
    if code.is_(k, "else"):
        edit = _dropped_branch(code, k)
        return [made("dropped_branch", *edit)] if edit else []
    if code.is_(k, "if") and token.first:
        edit = _removed_guard(code, k)
        return [made("removed_guard", *edit)] if edit else []
    return []


def _is_operand_end(token: Token) -> bool:
    return (
        token.kind in ("number", "string", "template", "regex")
        or (token.kind == "name" and token.text not in KEYWORDS)
        or (token.kind == "punct" and token.text in OPERAND_END)
    )


def _off_by_one(code: Code, k: int) -> list[tuple[int, int, str]]:
    """(start, end, replacement) of the literal at `k` one less and one more, where it counts."""
    token = code.tokens[k]
    if not token.text.isdigit() or code.is_(k - 1, "."):
        return []
    unary = code.is_(k - 1, "-") and (k < 2 or not _is_operand_end(code.tokens[k - 2]))
    before = k - 2 if unary else k - 1
    value = -int(token.text) if unary else int(token.text)
    index = code.is_(before, "[") and code.is_(k + 1, "]")
    beside = code.is_(before, *ARITHMETIC) or code.is_(k + 1, *ARITHMETIC)
    if not (index or beside or _slice_argument(code, before)):
        return []
    start = code.tokens[before + 1].start
    edits = []
    for new in (value - 1, value + 1):
        if new < 0 and not unary:
            continue
        if (
            new == 0
            and not unary
            and code.is_(before, "+", "-")
            and before >= 1
            and _is_operand_end(code.tokens[before - 1])
        ):
            edits.append((code.tokens[before - 1].end, token.end, ""))  # `n - 1` becomes `n`
        else:
            edits.append((start, token.end, str(new)))
    return edits


def _slice_argument(code: Code, before: int) -> bool:
    """Whether the token after `before` is an argument (first or second) of `.slice(` and its kin."""
    if code.is_(before, ","):
        before -= 1
        while before >= 0 and not code.is_(before, "(", ",", ";", "{", "}"):
            before = code.match.get(before, before) - 1
        if not code.is_(before, "("):
            return False
    return code.is_(before, "(") and code.is_(before - 2, ".", "?.") and code.is_(before - 1, *SLICE_LIKE)


def _dropped_branch(code: Code, k: int) -> tuple[int, int, str] | None:
    """`else { ... }` or `else if (...) { ... }` after a braced block, removed."""
    if not code.is_(k - 1, "}"):
        return None
    block = k + 1
    if code.is_(block, "if") and code.is_(block + 1, "(") and block + 1 in code.match:
        block = code.match[block + 1] + 1
    if not code.is_(block, "{") or block not in code.match:
        return None
    return code.tokens[k - 1].end, code.tokens[code.match[block]].end, ""


def _removed_guard(code: Code, k: int) -> tuple[int, int, str] | None:
    """`if (...) return ...;` (or a braced one) on lines of its own, without `else`, not alone in its block."""
    if not code.is_(k + 1, "(") or k + 1 not in code.match:
        return None
    body = code.match[k + 1] + 1
    if code.is_(body, "{") and body in code.match:
        last = code.match[body]
        if not code.is_(body + 1, *EXITS) or any(code.is_(j, ";") for j in range(body + 1, last - 1)):
            return None
    elif code.is_(body, *EXITS) and (end := _statement_end(code, body)) is not None:
        last = end
    else:
        return None
    after = last + 1
    if code.is_(after, "else") or (after < len(code.tokens) and not code.tokens[after].first):
        return None
    if code.is_(k - 1, "{") and code.is_(after, "}"):
        return None  # alone in its block
    start = code.text.rfind("\n", 0, code.tokens[k].start) + 1
    end = code.text.find("\n", code.tokens[last].end)
    return start, len(code.text) if end < 0 else end + 1, ""


def _statement_end(code: Code, k: int) -> int | None:
    """The last token of the statement that starts at `k`: its `;`, or the end of its line where the
    next line starts a statement of its own."""
    j = k + 1
    while j < len(code.tokens):
        if code.is_(j, "(", "[", "{") and j in code.match:
            j = code.match[j] + 1
            continue
        if code.is_(j, ";"):
            return j
        if code.is_(j, "}") or code.tokens[j].first:
            ended = code.tokens[j].first and not code._continues(j)
            return j - 1 if ended or code.is_(j, "}") else None
        j += 1
    return len(code.tokens) - 1
