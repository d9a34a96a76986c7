"""The README's environment-variable table is the registry's (csrc/common/env.cc)."""
import os

from torch_purlin import env_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_readme_env_table_matches_registry():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    assert env_table.render_readme(text) == text, "run: python -m torch_purlin.env_table --readme"
    for name, _, _ in env_table._C.env_vars():
        assert name.startswith("TORCH_PURLIN_")
