"""The protocol table's NCCL rows (NOTE [protocol table] in csrc/backend/protocol_table.h):
parsing and family matching. Routing itself runs on the GPU (test_gpu_collectives.py,
family protocol_table)."""
import pytest

from torch_purlin import _C, env_table


def default_table():
    return next(d for name, d, _ in _C.env_vars() if name == "TORCH_PURLIN_CUDA_NCCL_FROM")


def test_default_rows_cover_each_op_of_a_family():
    t = default_table()
    assert _C.nccl_table_from(t, "all_reduce") == 32 << 20
    assert _C.nccl_table_from(t, "all_reduce_coalesced") == 32 << 20
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
    assert "TORCH_PURLIN_CUDA_NCCL_FROM" in env_table.table()
