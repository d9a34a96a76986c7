"""Ulysses sequence parallelism around HF transformers' own attention, on torch_purlin.all_to_all_dims.

Every rank holds S/W tokens of the sequence. An attention function registered with transformers'
AttentionInterface (the hook its models call for attention) turns the local q, k, v
[B, heads, S/W, D] (transformers' transposed, strided views, taken as they are) into
[B, heads/W, S, D] with all_to_all_dims, runs transformers' stock sdpa attention on them, and
turns its [B, S, heads/W, D] output back into [B, S/W, heads, D], as DeepSpeed's
DistributedAttention does with permutes around all_to_all_single. A tiny random Llama (fp64, GQA)
run this way gives the hidden states of the same model run whole on one rank (to fp64 rounding:
the projections run on S/W rows instead of S), and bit for bit those of the same layer with
the composed all-to-all (permute + all_to_all_single + copy). World 2; world 4 on demand.

    python -m pytest test/clients/test_transformers_ulysses_cpu.py -q
    PURLIN_TEST_ULYSSES_WORLDS=2,4 python -m pytest test/clients/test_transformers_ulysses_cpu.py -q
"""
import os
import unittest

import pytest
import torch
import torch.distributed as dist
from torch.testing._internal.common_utils import run_tests

from hf_tp_util import transformers_missing
from mp_util import BACKEND, DistTestCase, spawned

WORLDS = os.environ.get("PURLIN_TEST_ULYSSES_WORLDS", "2").split(",")
pytestmark = pytest.mark.skipif(bool(transformers_missing()) or BACKEND != "purlin",
                                reason=transformers_missing() or "purlin's all_to_all_dims")


def all_to_all_composed(output, x, scatter_dim, gather_dim):
    """The stock path: chunks to the front (a permute copy), all_to_all_single, the cat (a copy)."""
    W = dist.get_world_size()
    send = torch.stack(x.chunk(W, scatter_dim)).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)
    output.copy_(torch.cat(recv.unbind(0), gather_dim))


def ulysses_attention(all_to_all):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def attention(module, query, key, value, attention_mask, **kwargs):
        W = dist.get_world_size()

        def heads_to_sequence(x):  # [B, h, S/W, D] -> [B, h/W, S, D]
            out = x.new_empty(x.shape[0], x.shape[1] // W, x.shape[2] * W, x.shape[3])
            all_to_all(out, x, 1, 2)
            return out
        q, k, v = (heads_to_sequence(t) for t in (query, key, value))
        # The whole sequence is here now: the causal mask is the full one (sdpa's is_causal),
        # not the mask transformers built for the local S/W tokens.
        out, _ = sdpa_attention_forward(module, q, k, v, None, **kwargs)  # [B, S, h/W, D]
        back = out.new_empty(out.shape[0], out.shape[1] // W, out.shape[2] * W, out.shape[3])
        all_to_all(back, out, 1, 2)
        return back, None
    return attention


class UlyssesCases:
    @spawned
    def test_ulysses_llama_matches_the_whole_model(self):
        import torch_purlin
        from transformers import AttentionInterface, LlamaConfig, LlamaModel
        W, me = self.world_size, self.rank
        AttentionInterface.register("purlin_ulysses", ulysses_attention(torch_purlin.all_to_all_dims))
        AttentionInterface.register("composed_ulysses", ulysses_attention(all_to_all_composed))
        cfg = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                          num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256)
        torch.manual_seed(0)  # the same weights on every rank
        model = LlamaModel(cfg).double().eval()
        B, S = 2, 12 * W
        ids = torch.randint(0, cfg.vocab_size, (B, S), generator=torch.Generator().manual_seed(self.next_seed()))
        mine = slice(me * S // W, (me + 1) * S // W)
        pos = torch.arange(S).expand(B, S)
        with torch.no_grad():
            model.config._attn_implementation = "sdpa"
            whole = model(input_ids=ids).last_hidden_state[:, mine]
            got = {}
            for impl in ("purlin_ulysses", "composed_ulysses"):
                model.config._attn_implementation = impl
                got[impl] = model(input_ids=ids[:, mine], position_ids=pos[:, mine]).last_hidden_state
        what = self.ctx("ulysses llama")
        self.assertTrue(torch.equal(got["purlin_ulysses"], got["composed_ulysses"]),
                        f"{what}: all_to_all_dims differs from permute + all_to_all_single + copy")
        torch.testing.assert_close(got["purlin_ulysses"], whole, rtol=1e-10, atol=1e-10, msg=lambda m: f"{what}: {m}")
        self.assertGreater(torch_purlin.counters().get("custom", (0, 0))[0], 0, f"{what}: no native custom collective")


@unittest.skipUnless("2" in WORLDS, "PURLIN_TEST_ULYSSES_WORLDS leaves out world 2")
class TestUlyssesWorld2(UlyssesCases, DistTestCase):
    WORLD_SIZE = 2


@unittest.skipUnless("4" in WORLDS, "world 4 on demand: PURLIN_TEST_ULYSSES_WORLDS=2,4")
class TestUlyssesWorld4(UlyssesCases, DistTestCase):
    WORLD_SIZE = 4


if __name__ == "__main__":
    run_tests()
