"""torchtitan's llama3 debug model trained with torchtitan's own tensor-parallel plan over a group.

Shared by test/clients/test_torchtitan_cpu.py and test/clients/test_gpu_torchtitan.py. Written against torchtitan
0.2.2 (the release for torch 2.10-2.12; docs/USING.md, "torchtitan"):

    missing = torchtitan_missing()                 # "" where it can run
    losses = train(dev, mesh_or_None, steps)       # per-step losses; mesh None: one rank, no parallelism

What is torchtitan's: the model (`Transformer` with `llama3_args["debugmodel"]`: dim 256, 6 layers,
16 heads, vocabulary 2048), its initialisation (`init_weights`), its tensor- and sequence-parallel
plan (`apply_tp`: column/row-parallel attention and MLP, sequence-parallel norms, a vocabulary-parallel
embedding and output), its loss (`cross_entropy_loss`, sum over tokens) under loss parallelism, as
its trainer sets them up. What is the test's: the loop (AdamW, a few steps) and the data: random
token ids from a seeded generator, the same batches for every run, instead of its tokenizer and
test dataset (which live in torchtitan's repository, not in its wheel).

NOTE [torchtitan stand-ins]
`torchtitan.models.llama3` imports torchtitan's data pipeline and metrics, hence the packages
`datasets` (pyarrow, pandas, ...) and `tensorboard`, which the test never calls. Where they are not
installed (the GPU machines carry pure-Python wheels only), stand-in modules satisfy those imports
and raise if anything calls them; installed packages are always used as they are.
"""
import copy
import importlib
import importlib.util
import sys
import types

import torch

SEQ = 64
BATCH = 4
LR = 1e-3


def _unavailable(*args, **kwargs):
    raise RuntimeError("torchtitan_tp: a stand-in module was called (NOTE [torchtitan stand-ins])")


class _Unavailable:
    def __init__(self, *args, **kwargs):
        _unavailable()


def _install_stand_ins():
    if "datasets" not in sys.modules and importlib.util.find_spec("datasets") is None:
        ds = types.ModuleType("datasets")
        ds.Dataset = ds.IterableDataset = _Unavailable
        ds.load_dataset = _unavailable
        sub = types.ModuleType("datasets.distributed")
        sub.split_dataset_by_node = _unavailable
        ds.distributed = sub
        sys.modules.update({"datasets": ds, "datasets.distributed": sub})
    if "torch.utils.tensorboard" not in sys.modules and importlib.util.find_spec("tensorboard") is None:
        tb = types.ModuleType("torch.utils.tensorboard")
        tb.SummaryWriter = _Unavailable
        sys.modules["torch.utils.tensorboard"] = tb


def torchtitan_missing():
    """Why torchtitan's llama3 cannot be used here ("" if it can)."""
    if importlib.util.find_spec("torchtitan") is None:
        return "needs torchtitan 0.2.2 (pip install --no-deps -r requirements-clients.txt)"
    _install_stand_ins()
    try:
        from torchtitan.components.loss import cross_entropy_loss  # noqa: F401
        from torchtitan.models.llama3 import Transformer, llama3_args  # noqa: F401
        from torchtitan.models.llama3.infra.parallelize import apply_tp  # noqa: F401
    except Exception as e:  # noqa: BLE001 — an import error names the missing package
        return f"torchtitan's llama3 cannot be imported: {type(e).__name__}: {e}"
    return ""


def batches(steps, vocab, seed=2024):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (BATCH, SEQ + 1), generator=g) for _ in range(steps)]


def build(dev):
    """torchtitan's debug model, initialised as its trainer does (the same weights for a given seed)."""
    from torchtitan.models.llama3 import Transformer, llama3_args
    args = copy.deepcopy(llama3_args["debugmodel"])
    args.max_seq_len = SEQ
    torch.manual_seed(0)
    with torch.device("meta"):
        model = Transformer(args)
    model.to_empty(device=dev)
    torch.manual_seed(0)
    with torch.no_grad():
        model.init_weights(buffer_device=dev)
    return model, args


def train(dev, mesh, steps, dp_mesh=None):
    """Per-step losses of `steps` AdamW steps on the same global batches. mesh: the 1-D tensor-parallel
    DeviceMesh (None: no tensor parallelism); dp_mesh: a data-parallel DeviceMesh for torchtitan's
    FSDP2 (`apply_fsdp`, gradients summed as its trainer does), each of its ranks taking its rows of
    every batch (None: no data parallelism). Without either: the single-rank reference."""
    import torch.distributed as dist
    from torch.distributed.tensor.parallel import loss_parallel
    from torchtitan.components.loss import cross_entropy_loss
    from torchtitan.models.llama3.infra.parallelize import apply_fsdp, apply_tp, disable_fsdp_gradient_division

    model, args = build(dev)
    if mesh is not None:
        apply_tp(model, mesh, loss_parallel=True, enable_float8_tensorwise_tp=False)
    dp, dp_rank = 1, 0
    if dp_mesh is not None:
        apply_fsdp(model, dp_mesh, param_dtype=torch.float32, reduce_dtype=torch.float32, pp_enabled=False)
        disable_fsdp_gradient_division(model)
        dp, dp_rank = dp_mesh.size(), dp_mesh.get_local_rank()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, foreach=False)
    losses = []
    for batch in batches(steps, args.vocab_size):
        rows = BATCH // dp
        batch = batch[dp_rank * rows:(dp_rank + 1) * rows].to(dev)
        inputs, labels = batch[:, :-1], batch[:, 1:]
        opt.zero_grad()
        pred = model(inputs)
        ctx = loss_parallel() if mesh is not None else _null()
        with ctx:
            loss = cross_entropy_loss(pred, labels) / (labels.numel() * dp)  # sum over the global batch's tokens
            loss.backward()
        opt.step()
        full = (loss.full_tensor() if hasattr(loss, "full_tensor") else loss).detach().float()
        if dp_mesh is not None:
            dist.all_reduce(full, group=dp_mesh.get_group())
        losses.append(float(full.cpu()))
    return losses


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def compare(got, want, what, rtol, atol):
    """'' or what differs between two loss curves."""
    bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if not abs(g - w) <= atol + rtol * abs(w)]
    if len(got) != len(want) or bad:
        return f"{what}: losses differ at steps {[b[0] for b in bad]} (rtol {rtol}, atol {atol}): {got} vs {want}"
    return ""
