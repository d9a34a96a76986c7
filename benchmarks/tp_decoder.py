"""tp_decoder.py — a Llama-architecture decoder with tensor parallelism over a group, for e2e_tp_decode.py.

Per layer (Megatron-style): RMSNorm, fused q/k/v projection column-parallel (this rank's heads and
kv heads), rotary embedding, attention over a static KV cache, output projection row-parallel and
an all_reduce; RMSNorm, gate/up projections column-parallel, SiLU(gate) * up, down projection
row-parallel and an all_reduce. The embedding is replicated; the LM head is column-parallel over
the vocabulary and its logits are all-gathered; the next token is the greedy choice. Every shape is
static, the position is a device tensor and the collectives are injected (a Comm), so one decode
step can be captured in a CUDA graph.

Weights are random (seeded per tensor: every rank draws the full tensor and keeps its shard), so
rank 0 can also hold every shard and compute the single-rank reference (Reference): the same
per-shard matrix products with the same shapes, their partial sums added in float32 and rounded
once. At world 2 that is exactly what a correct all_reduce returns (a + b, rounded once, whoever
adds), so the tensor-parallel output must equal it bit for bit.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Shape:
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int


SHAPES = {
    "llama3-8b": Shape(hidden=4096, intermediate=14336, heads=32, kv_heads=8, head_dim=128, vocab=128256),
    "llama3.2-1b": Shape(hidden=2048, intermediate=8192, heads=32, kv_heads=8, head_dim=64, vocab=128256),
    "tiny": Shape(hidden=64, intermediate=128, heads=8, kv_heads=4, head_dim=8, vocab=256),
}
EPS = 1e-5
ROPE_THETA = 500000.0


def check_divisible(shape, world):
    for name in ("intermediate", "heads", "kv_heads", "vocab"):
        if getattr(shape, name) % world:
            raise SystemExit(f"e2e_tp_decode: {name} {getattr(shape, name)} is not divisible by the world {world}")


def _draw(seed, rows, cols, dtype, dev, scale=None):
    """A random (rows, cols) weight of std 1/sqrt(cols), the same on every rank."""
    g = torch.Generator(device=dev).manual_seed(seed)
    w = torch.randn(rows, cols, generator=g, device=dev, dtype=torch.float32)
    return (w * (scale if scale is not None else cols ** -0.5)).to(dtype)


class Weights:
    """Shard `part` of `parts` of every weight of the model (part None: the full tensors)."""

    def __init__(self, shape, layers, part, parts, dtype, dev, seed=1234):
        s = shape
        hq, hkv, d = s.heads // parts, s.kv_heads // parts, s.head_dim
        inter, vocab = s.intermediate // parts, s.vocab // parts
        self.hq, self.hkv, self.d, self.parts = hq, hkv, d, parts

        def rows(t, n, i):  # the i-th block of n rows of the full tensor t
            return t[i * n:(i + 1) * n].contiguous()

        def cols(t, n, i):
            return t[:, i * n:(i + 1) * n].contiguous()

        self.embed = _draw(seed, s.vocab, s.hidden, dtype, dev, scale=1.0)
        self.norm = 1.0 + 0.1 * _draw(seed + 1, 1, s.hidden, torch.float32, dev, scale=1.0).to(dtype)[0]
        self.lm_head = rows(_draw(seed + 2, s.vocab, s.hidden, dtype, dev), vocab, part)
        self.layers = []
        for i in range(layers):
            base = seed + 100 * (i + 1)
            q = _draw(base, s.heads * d, s.hidden, dtype, dev)
            k = _draw(base + 1, s.kv_heads * d, s.hidden, dtype, dev)
            v = _draw(base + 2, s.kv_heads * d, s.hidden, dtype, dev)
            qkv = torch.cat([rows(q, hq * d, part), rows(k, hkv * d, part), rows(v, hkv * d, part)])
            self.layers.append(dict(
                attn_norm=1.0 + 0.1 * _draw(base + 3, 1, s.hidden, torch.float32, dev, scale=1.0).to(dtype)[0],
                qkv=qkv,
                o=cols(_draw(base + 4, s.hidden, s.heads * d, dtype, dev), hq * d, part),
                mlp_norm=1.0 + 0.1 * _draw(base + 5, 1, s.hidden, torch.float32, dev, scale=1.0).to(dtype)[0],
                gate=rows(_draw(base + 6, s.intermediate, s.hidden, dtype, dev), inter, part),
                up=rows(_draw(base + 7, s.intermediate, s.hidden, dtype, dev), inter, part),
                down=cols(_draw(base + 8, s.hidden, s.intermediate, dtype, dev), inter, part),
            ))


class Cache:
    """Static KV caches of one rank for a batch: (batch, max_len, kv heads of the rank, head_dim) per layer."""

    def __init__(self, w, layers, batch, max_len, dtype, dev):
        self.k = [torch.zeros(batch, max_len, w.hkv, w.d, dtype=dtype, device=dev) for _ in range(layers)]
        self.v = [torch.zeros_like(self.k[0]) for _ in range(layers)]
        self.max_len = max_len


def rms_norm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w


def rope(x, pos, head_dim):
    """Rotary embedding of x (batch, T, heads, head_dim) at positions pos (T,) (a device tensor)."""
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, device=x.device, dtype=torch.float32) / head_dim))
    ang = pos.float()[:, None] * inv[None, :]                      # (T, head_dim/2)
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    xf = x.float()
    half = head_dim // 2
    rot = torch.cat([-xf[..., half:], xf[..., :half]], -1)
    return (xf * cos[None, :, None, :] + rot * sin[None, :, None, :]).to(x.dtype)


def attention_partial(x, lw, w, cache, li, pos):
    """This shard's attention output projected by its columns of o: the row-parallel partial (batch, T, hidden).
    Writes the shard's k and v at positions pos into the cache."""
    b, t, _ = x.shape
    h = rms_norm(x, lw["attn_norm"])
    qkv = h @ lw["qkv"].t()
    q, k, v = qkv.split([w.hq * w.d, w.hkv * w.d, w.hkv * w.d], dim=-1)
    q = rope(q.view(b, t, w.hq, w.d), pos, w.d)
    k = rope(k.view(b, t, w.hkv, w.d), pos, w.d)
    cache.k[li].index_copy_(1, pos, k)
    cache.v[li].index_copy_(1, pos, v.view(b, t, w.hkv, w.d))
    keys = torch.arange(cache.max_len, device=x.device)
    mask = keys[None, :] <= pos[:, None]                           # (T, max_len): causal, up to each position
    rep = w.hq // w.hkv
    kk = cache.k[li].transpose(1, 2).repeat_interleave(rep, dim=1)  # (batch, heads, max_len, head_dim)
    vv = cache.v[li].transpose(1, 2).repeat_interleave(rep, dim=1)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), kk, vv, attn_mask=mask[None, None])
    return o.transpose(1, 2).reshape(b, t, w.hq * w.d) @ lw["o"].t()


def mlp_partial(x, lw):
    h = rms_norm(x, lw["mlp_norm"])
    return (F.silu(h @ lw["gate"].t()) * (h @ lw["up"].t())) @ lw["down"].t()


def logits_local(x, w):
    return rms_norm(x, w.norm) @ w.lm_head.t()                    # (batch, T, vocab / parts)


class Decoder:
    """One rank's shard of the model, its caches, and the forward that calls comm between shards."""

    def __init__(self, weights, cache, comm):
        self.w, self.cache, self.comm = weights, cache, comm

    def forward(self, tokens, pos):
        """tokens (batch, T) at positions pos (T,): the logits of the last position (batch, vocab)."""
        w, comm = self.w, self.comm
        x = w.embed[tokens]
        for li, lw in enumerate(w.layers):
            a = attention_partial(x, lw, w, self.cache, li, pos)
            comm.all_reduce(a)
            x = x + a
            m = mlp_partial(x, lw)
            comm.all_reduce(m)
            x = x + m
        local = logits_local(x[:, -1:], w)[:, 0]                   # (batch, vocab / world)
        return comm.all_gather_cols(local)


class Reference:
    """The single-rank reference: every shard's computation on one rank, partial sums added in float32."""

    def __init__(self, shards, caches):
        self.shards, self.caches = shards, caches

    def forward(self, tokens, pos):
        w0 = self.shards[0]
        x = w0.embed[tokens]
        for li in range(len(w0.layers)):
            parts = [attention_partial(x, w.layers[li], w, c, li, pos) for w, c in zip(self.shards, self.caches)]
            x = x + torch.stack([p.float() for p in parts]).sum(0).to(x.dtype)
            parts = [mlp_partial(x, w.layers[li]) for w in self.shards]
            x = x + torch.stack([p.float() for p in parts]).sum(0).to(x.dtype)
        return torch.cat([logits_local(x[:, -1:], w)[:, 0] for w in self.shards], dim=-1)
