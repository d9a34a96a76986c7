"""The environment-variable tables are the registry's (csrc/common/env.cc): the README lists the
user-facing variables, docs/TUNING.md the tuning and debugging ones, each exactly once."""
import os
import re

from torch_purlin import env_table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return f.read()


def listed(text):
    return re.findall(r"^\| `(TORCH_PURLIN_[A-Z0-9_]+)` \|", text, re.M)


def test_readme_env_table_matches_registry():
    text = read("README.md")
    assert env_table.render_readme(text) == text, "run: python -m torch_purlin.env_table --readme"
    for name, _, _ in env_table._C.env_vars():
        assert name.startswith("TORCH_PURLIN_")


def test_tuning_doc_matches_registry():
    assert read("docs", "TUNING.md") == env_table.render_tuning(), "run: python -m torch_purlin.env_table --tuning"


def test_each_variable_is_in_exactly_one_table_by_its_audience():
    readme, tuning = listed(read("README.md")), listed(read("docs", "TUNING.md"))
    registry = env_table.variables()
    assert len(readme) == len(set(readme)) and len(tuning) == len(set(tuning))
    assert sorted(readme + tuning) == sorted(v[0] for v in registry)
    for name, default, meaning, audience, across in registry:
        assert (name in readme) == (audience == "user"), name
        assert audience in ("user", "tuning") and across in ("equal", "combined", "local"), name
        assert meaning.strip(), name
        if across == "combined":  # the rule that combines the ranks' values is stated
            assert re.search(r"\b(any|every) rank", meaning), name
        # the table's "across ranks" column names the rule (NOTE [settings across ranks])
        row = next(l for l in env_table.table(audience).splitlines() if l.startswith(f"| `{name}` |"))
        assert f"| {env_table.ACROSS[across]} |" in row, row
    assert 0 < len(readme) <= 10, "the README lists the user-facing variables only"


def test_retired_variables_are_not_in_the_registry():
    names = {v[0] for v in env_table.variables()}
    for name, instead, _fatal in env_table._C.env_retired():
        assert name not in names and instead, name


def test_user_facing_text_sends_no_one_to_note_names():
    # NOTE [...] blocks explain the code to its readers; users read the README, the variables' texts
    # (README table, retired-variable messages) and --help.
    import subprocess
    import sys
    assert "NOTE [" not in read("README.md")
    for name, _, meaning, audience, _ in env_table.variables():
        assert audience != "user" or "NOTE [" not in meaning, name
    for name, instead, _fatal in env_table._C.env_retired():
        assert "NOTE [" not in instead, name
    r = subprocess.run([sys.executable, "-m", "torch_purlin.run", "--help"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "torchrun" in r.stdout and "NOTE [" not in r.stdout, r.stdout + r.stderr
