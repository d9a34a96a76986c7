"""A tiny random Llama run by HF transformers with tensor parallelism over the group under test.

Shared by test/clients/test_transformers_tp_cpu.py and test/clients/test_gpu_transformers.py:

    make_reference(folder)             # the parent: model saved, reference logits and greedy tokens
    tp_run(folder, rank, world, dev)   # a rank whose default group is purlin: [(what, error or None)]

The model is built from a config (no download) with random weights large enough that the greedy
choice at every step wins by a margin far above float32 rounding (checked when the reference is
made), so "the same tokens" is a meaningful, stable comparison. Tensor parallelism is transformers'
own: `from_pretrained(folder, distributed_config=DistributedConfig(tp_size=world))` with the
model's predefined plan (q/k/v/gate/up column-parallel, o/down row-parallel: one all_reduce each,
lm_head column-parallel with a gathered output: an all_gather), over the already initialised
default group.
"""
import os

import torch
import torch.distributed as dist

PROMPT_LEN = 7
BATCH = 2
NEW_TOKENS = 8
MIN_MARGIN = 1e-2  # top-1 minus top-2 logit at every greedy step of the reference
LOGIT_ATOL = 2e-5  # fp32 logits of ~unit scale (CPU): partial sums added in another order
GPU_LOGIT_ATOL = 1e-4  # against the CPU reference: other GEMM and attention kernels


def transformers_missing():
    """Why the test cannot run here ("" if it can)."""
    try:
        import transformers  # noqa: F401
        from transformers.distributed import DistributedConfig  # noqa: F401
    except ImportError as e:
        return f"needs transformers with transformers.distributed (requirements-test.txt): {e}"
    return ""


def tiny_config():
    """Heads, kv heads, intermediate size and vocabulary divisible by 2 and 4 (the worlds tested)."""
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                       initializer_range=0.25, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1,
                       eos_token_id=None)


def make_reference(folder, seed=2026):
    """Saves the model and {input_ids, logits, tokens} of the non-parallel fp32 model in `folder`."""
    from transformers import LlamaForCausalLM
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_config()).float().eval()
    model.generation_config.pad_token_id = 0
    model.save_pretrained(folder)
    g = torch.Generator().manual_seed(seed + 1)
    input_ids = torch.randint(2, model.config.vocab_size, (BATCH, PROMPT_LEN), generator=g)
    with torch.no_grad():
        logits = model(input_ids).logits
        out = model.generate(input_ids, max_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
                             return_dict_in_generate=True)
    steps = torch.stack(out.logits, 1)  # (batch, new tokens, vocab)
    top2 = steps.topk(2, dim=-1).values
    margin = float((top2[..., 0] - top2[..., 1]).min())
    assert margin > MIN_MARGIN, f"the reference's greedy choice is too close to call ({margin:.2e}): pick another seed"
    torch.save({"input_ids": input_ids, "logits": logits, "tokens": out.sequences}, os.path.join(folder, "reference.pt"))
    return margin


def load_tp(folder, world, device_mesh=None):
    from transformers import AutoModelForCausalLM
    from transformers.distributed import DistributedConfig
    model = AutoModelForCausalLM.from_pretrained(folder, distributed_config=DistributedConfig(tp_size=world),
                                                 device_mesh=device_mesh, dtype=torch.float32)
    model.generation_config.pad_token_id = 0
    return model.eval()


def first_difference(got, want):
    bad = (got != want).nonzero()
    i = tuple(bad[0].tolist())
    return f"{bad.shape[0]}/{got.numel()} differ; first at {i}: {got[i].item()!r} vs {want[i].item()!r}"


def tp_run(folder, rank, world, dev, exact_against=None, logit_atol=LOGIT_ATOL):
    """Loads the saved model with tensor parallelism over the default group (purlin) on `dev` and checks its
    logits and greedy tokens against the reference; with `exact_against` (a group of another backend), also
    loads it over that group and requires bit-identical logits (at world 2 every all_reduce adds two
    partial sums, the same numbers whoever adds them). Returns [(what, error or None)]."""
    from torch.distributed.tensor import DTensor
    os.environ.setdefault("LOCAL_RANK", str(dev.index if dev.index is not None else rank))  # transformers reads it
    ref = torch.load(os.path.join(folder, "reference.pt"))
    ids = ref["input_ids"].to(dev)
    results = []

    def check(what, fn):
        try:
            fn()
            results.append((what, None))
        except Exception as e:  # noqa: BLE001 — every case is reported
            results.append((what, f"rank {rank}: {type(e).__name__}: {e}"))

    model = load_tp(folder, world)
    state = {}

    def sharded():
        w = model.model.layers[0].self_attn.q_proj.weight
        full = model.config.hidden_size
        local = w.to_local() if isinstance(w, DTensor) else w
        assert local.shape[0] == full // world, f"q_proj is not sharded: local weight {tuple(local.shape)}"
        assert str(local.device).startswith(dev.type), f"weights on {local.device}, not {dev}"

    def logits():
        with torch.no_grad():
            state["logits"] = model(ids).logits.float().cpu()
        got, want = state["logits"], ref["logits"]
        assert got.shape == want.shape, f"logits {tuple(got.shape)} vs {tuple(want.shape)}"
        err = float((got - want).abs().max())
        assert err <= logit_atol, f"logits differ from the non-parallel model's by up to {err:.3e} (> {logit_atol})"

    def tokens():
        with torch.no_grad():
            seq = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False).cpu()
        assert torch.equal(seq, ref["tokens"]), "greedy tokens: " + first_difference(seq, ref["tokens"])

    def native():
        import torch_purlin
        counters = torch_purlin.counters(device=dev.type)
        assert counters.get("all_reduce", (0, 0))[0] > 0, f"no native all_reduce: {counters}"
        fell_back = {op: c for op, c in counters.items() if c[1]}
        assert not fell_back, f"collectives served by the fallback: {fell_back} (all: {counters})"

    check("weights sharded", sharded)
    check("logits equal the non-parallel model's", logits)
    check("greedy tokens equal the non-parallel model's", tokens)
    check("every collective ran natively", native)
    if exact_against is not None:
        from torch.distributed.device_mesh import DeviceMesh

        def exact():
            other = load_tp(folder, world, DeviceMesh.from_group(exact_against, dev.type))
            with torch.no_grad():
                want = other(ids).logits.float().cpu()
            assert torch.equal(state["logits"], want), \
                f"logits differ from the same run over {dist.get_backend(exact_against)}: " + \
                first_difference(state["logits"], want)

        check("logits bit-identical to the same model over another backend", exact)
    return results
