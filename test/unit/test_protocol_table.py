"""The protocol table's NCCL rows (NOTE [protocol table] in csrc/backend/group/protocol_table.h):
parsing and family matching. Routing itself runs on the GPU (test_gpu_collectives.py,
family protocol_table)."""
import os

import pytest

from torch_purlin import _C


def default_table():
    return next(d for name, d, _ in _C.env_vars() if name == "TORCH_PURLIN_CUDA_NCCL_FROM")


def test_default_rows_cover_each_op_of_a_family():
    t = default_table()
    for w in (3, 4, 8):
        assert _C.nccl_table_from(t, "all_reduce", w) == 32 << 20
        assert _C.nccl_table_from(t, "all_reduce_coalesced", w) == 32 << 20
    # W = 2: one-shot all_reduce (pushed) beat NCCL at 64M-256M (NOTE [protocol table])
    assert _C.nccl_table_from(t, "all_reduce", 2) == 256 << 20
    assert _C.nccl_table_from(t, "all_to_all_single") == 1 << 30
    assert _C.nccl_table_from(t, "broadcast") == 64 << 20
    # Native at every size since NOTE [matched waits] (cuda_h200x2_20261201q_large.md).
    for op in ("reduce", "gather", "scatter", "barrier", "all_reducer", "all_gather_into_tensor",
               "reduce_scatter_tensor_coalesced"):
        assert _C.nccl_table_from(t, op) == 0, op


def test_longest_family_wins_and_none_disables():
    t = "reduce=1K, reduce_scatter=2K ,ALL_GATHER=1.5M"
    assert _C.nccl_table_from(t, "reduce") == 1024
    assert _C.nccl_table_from(t, "reduce_scatter_tensor") == 2048
    assert _C.nccl_table_from(t, "all_gather") == 3 << 19
    for off in ("", "none", " none "):
        assert _C.nccl_table_from(off, "all_reduce") == 0


@pytest.mark.parametrize("bad", ["all_reduce", "=4M", "all_reduce=4X", "all_reduce=lots"])
def test_bad_items_name_the_variable(bad):
    with pytest.raises(ValueError, match="TORCH_PURLIN_CUDA_NCCL_FROM"):
        _C.nccl_table_from(bad, "all_reduce")


def test_readme_lists_the_table():
    """The protocol table is a tuning variable: the README links docs/TUNING.md, which lists it with
    the registry's default (what a user reads is what the code does)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "README.md")) as f:
        readme = f.read()
    with open(os.path.join(root, "docs", "TUNING.md")) as f:
        tuning = f.read()
    assert "docs/TUNING.md" in readme
    default = default_table()
    row = next((l for l in tuning.splitlines() if l.startswith("| `TORCH_PURLIN_CUDA_NCCL_FROM`")), "")
    assert f"`{default}`" in row, row
    assert "TORCH_PURLIN_CUDA_NCCL_FROM" not in readme.split("<!-- env-table")[-1], "a tuning variable in the README's table"


def test_world_rows_replace_the_family_row_in_their_world_only():
    t = "all_reduce=32M,all_reduce@2=512M,broadcast@4=1M"
    assert _C.nccl_table_from(t, "all_reduce", 2) == 512 << 20
    assert _C.nccl_table_from(t, "all_reduce_coalesced", 2) == 512 << 20
    for w in (1, 3, 4, 8):
        assert _C.nccl_table_from(t, "all_reduce", w) == 32 << 20, w
    assert _C.nccl_table_from(t, "broadcast", 4) == 1 << 20
    assert _C.nccl_table_from(t, "broadcast", 2) == 0  # no plain row: native elsewhere
    # the order of the items does not matter: the world's row wins either way
    assert _C.nccl_table_from("all_reduce@2=1K,all_reduce=2K", "all_reduce", 2) == 1024


@pytest.mark.parametrize("bad", ["all_reduce@=4M", "all_reduce@x=4M", "all_reduce@0=4M", "@2=4M", "all_reduce@2"])
def test_bad_world_rows_name_the_variable(bad):
    with pytest.raises(ValueError, match="TORCH_PURLIN_CUDA_NCCL_FROM"):
        _C.nccl_table_from(bad, "all_reduce", 2)


def test_two_shot_threshold_per_world():
    default = next(d for name, d, _ in _C.env_vars() if name == "TORCH_PURLIN_CUDA_TWO_SHOT_BYTES")
    for w in (1, 3, 4, 8):
        assert _C.bytes_for_world(default, w) == 8 << 20
    assert _C.bytes_for_world(default, 2) == 4 << 30
    assert _C.bytes_for_world("8M,@2=1G", 2) == 1 << 30
    assert _C.bytes_for_world("@2=1G, 8M", 2) == 1 << 30
    for w in (3, 4, 8):
        assert _C.bytes_for_world("8M,@2=1G", w) == 8 << 20
    assert _C.bytes_for_world("256K", 2) == 256 << 10


@pytest.mark.parametrize("bad", ["", "@2=1G", "8M,@2", "8M,x@2=1G", "8M,@two=1G", "8M,@2=1Q", "lots"])
def test_bad_two_shot_lists_name_the_variable(bad):
    with pytest.raises(ValueError, match="TORCH_PURLIN_CUDA_TWO_SHOT_BYTES"):
        _C.bytes_for_world(bad, 2)
