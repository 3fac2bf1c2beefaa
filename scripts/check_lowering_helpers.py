#!/usr/bin/env python3
"""Fails when csrc/lowering/ defines one helper twice: two file-scope function definitions with
the same body (whatever their names), or with the same name and parameter list. Shared helpers
belong in lowering/common.h (dtype policy, small shape/value helpers) or lowering/lowering.h.

Only file-scope definitions are read (they start in column 0, as clang-format leaves them inside
namespaces); member functions and lambdas are not helpers in this sense. A body of one short
statement (`{ return {ctx.tensor(0)}; }`) still counts: copying it is how the helpers drifted."""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOWERING = ROOT / "csrc" / "lowering"
HEAD = re.compile(r"^(?:(?:inline|static|constexpr)\s+)*[A-Za-z_][\w:<>,\s*&]*?[\s*&]([a-z_]\w*)\(")
NOT_TYPES = {"return", "namespace", "using", "struct", "class", "if", "for", "while", "switch",
             "else", "case", "template", "typedef", "enum", "static_assert", "delete", "new"}


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def definitions(path: Path):
    """(name, parameters, body, line) of each file-scope function definition in `path`."""
    text = strip_comments(path.read_text())
    lines = text.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    for i, line in enumerate(lines):
        m = HEAD.match(line)
        if not m or line.split()[0] in NOT_TYPES or line.startswith("TORCHTPU_"):
            continue
        start = offsets[i] + m.end() - 1  # at '('
        depth, j = 0, start
        while j < len(text):  # the parameter list
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
            if depth == 0:
                break
        params = text[start:j]
        k = j
        while k < len(text) and text[k] not in "{;=":
            k += 1
        if k >= len(text) or text[k] != "{":
            continue  # a declaration or a variable
        depth, e = 0, k
        while e < len(text):
            depth += {"{": 1, "}": -1}.get(text[e], 0)
            e += 1
            if depth == 0:
                break
        norm = lambda s: re.sub(r"\s+", " ", s).strip()
        yield m.group(1), norm(re.sub(r"\b\w+\s*(?=[,)]|=)", "", params)), norm(text[k:e]), i + 1


def main() -> int:
    by_body, by_sig = defaultdict(list), defaultdict(list)
    for path in sorted(LOWERING.glob("*.[ch]*")):
        for name, params, body, line in definitions(path):
            where = f"csrc/lowering/{path.name}:{line} {name}"
            by_body[body].append((path.name, where))
            by_sig[(name, params)].append((path.name, where))
    problems = []
    for groups, what in ((by_body, "same body"), (by_sig, "same name and parameters")):
        for places in groups.values():
            if len({f for f, _ in places}) > 1 or len(places) > 1 and what == "same body":
                problems.append(f"{what}: " + ", ".join(w for _, w in places))
    if problems:
        print("check_lowering_helpers: a lowering helper is defined twice; move it to "
              "lowering/common.h:", file=sys.stderr)
        print("\n".join(sorted(set(problems))), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
