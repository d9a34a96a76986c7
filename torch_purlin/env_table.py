"""Prints the TORCH_PURLIN_* registry (csrc/common/env.cc) as a Markdown table.

    python -m torch_purlin.env_table            # print
    python -m torch_purlin.env_table --readme   # rewrite the table in README.md
"""
import os
import re
import sys

from . import _C

BEGIN, END = "<!-- env-table", "<!-- /env-table -->"


def table():
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, default, meaning in _C.env_vars():
        rows.append(f"| `{name}` | `{default}` | {meaning} |" if default else f"| `{name}` | (unset) | {meaning} |")
    return "\n".join(rows)


def render_readme(text):
    pattern = re.compile(r"(<!-- env-table[^\n]*-->\n)(.*?)(" + re.escape(END) + ")", re.S)
    return pattern.sub(lambda m: m.group(1) + table() + "\n" + m.group(3), text)


if __name__ == "__main__":
    if "--readme" in sys.argv:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(render_readme(text))
    else:
        print(table())
