"""A symbolic simulator of SNAC plans, used by the plan unit tests.

Every input element gets a unique id; Copy moves ids, Reduce records the
ordered tuple of source ids. A write into a peer's output (NOTE [peer outputs])
is an error unless that peer is inside its plan (started, not returned). Ranks are stepped one op at a time in a random
order (a Wait only proceeds once its flag is high enough), so workspace-reuse
races show up as wrong values, and a schedule where no rank can move while
some are unfinished is a deadlock.
"""
import random

IN, OUT, WS = 0, 1, 2
WAIT, SIGNAL, COPY, REDUCE = 0, 1, 2, 3


class PlanError(AssertionError):
    pass


def element_id(rank, i):
    return (rank << 32) | (i + 1)


def expected_outputs(spec):
    """out[rank][i] = id (copy) or tuple of ids (reduce), None if untouched."""
    outs = [[None] * n for n in spec.output_numel]
    reduce = spec.kind.name == "REDUCE"
    for ch in spec.chunks:
        n = ch.numel()
        src_ids = [[element_id(p.rank, x) for x in region_elements(p.region, n)] for p in ch.sources]
        for d in ch.dests:
            for e, x in enumerate(region_elements(d.region, n)):
                outs[d.rank][x] = tuple(s[e] for s in src_ids) if reduce else src_ids[0][e]
    return outs


def region_elements(region, n):
    return [region.offset + (e // region.row_len) * region.stride + e % region.row_len for e in range(n)]


def simulate(spec, plans, seed=0):
    """Runs every rank's plan; returns (outputs, writes) or raises PlanError."""
    W = spec.world
    rng = random.Random(seed)
    ws_size = max([p["workspace_elems"] for p in plans] + [1])
    inputs = [[element_id(r, i) for i in range(spec.input_numel[r])] for r in range(W)]
    outputs = [[None] * spec.output_numel[r] for r in range(W)]
    writes = [[0] * spec.output_numel[r] for r in range(W)]
    ws = [[None] * ws_size for _ in range(W)]
    flags = {}  # (at_rank, from_rank, flag) -> value
    pcs = [0] * W

    def buf(ref, me):
        kind, rank, off = ref
        if kind == IN:  # own input, or a peer's in zero-copy plans
            return inputs[rank], off
        if kind == OUT:  # own output, or a peer's in write_peer_outputs plans (NOTE [peer outputs])
            return outputs[rank], off
        return ws[rank], off

    def runnable(r):
        ops = plans[r]["ops"]
        if pcs[r] >= len(ops):
            return False
        op = ops[pcs[r]]
        return op["code"] != WAIT or flags.get((r, op["peer"], op["flag"]), 0) >= op["value"]

    while True:
        ready = [r for r in range(W) if runnable(r)]
        if not ready:
            if all(pcs[r] >= len(plans[r]["ops"]) for r in range(W)):
                return outputs, writes
            stuck = {r: plans[r]["ops"][pcs[r]] for r in range(W) if pcs[r] < len(plans[r]["ops"])}
            raise PlanError(f"deadlock: {stuck}")
        r = rng.choice(ready)
        op = plans[r]["ops"][pcs[r]]
        pcs[r] += 1
        code = op["code"]
        if code == SIGNAL:
            key = (op["peer"], r, op["flag"])
            if op["value"] <= flags.get(key, 0):
                raise PlanError(f"rank {r}: signal {op} does not raise the flag")
            flags[key] = op["value"]
        elif code in (COPY, REDUCE):
            dbuf, doff = buf(op["dst"], r)
            srcs = [buf(s, r) for s in op["srcs"]]
            for e in range(op["n"]):
                vals = []
                for sbuf, soff in srcs:
                    if soff + e >= len(sbuf) or sbuf[soff + e] is None:
                        raise PlanError(f"rank {r}: {op} reads an unwritten element")
                    vals.append(sbuf[soff + e])
                dbuf[doff + e] = vals[0] if code == COPY else tuple(vals)
                if op["dst"][0] == OUT:
                    owner = op["dst"][1]
                    # A peer's output belongs to its caller until it reached the collective and again
                    # once the collective returned there.
                    if owner != r and (pcs[owner] == 0 or pcs[owner] >= len(plans[owner]["ops"])):
                        raise PlanError(f"rank {r}: {op} writes rank {owner}'s output outside its collective")
                    writes[owner][doff + e] += 1
        if pcs[r] == len(plans[r]["ops"]):
            # The collective returned on rank r: its caller may now overwrite the input.
            inputs[r][:] = [None] * len(inputs[r])


def check_signals_match(plans):
    """Every Wait has a Signal with the same (flag, value) from its peer."""
    sent = set()
    for p in plans:
        for op in p["ops"]:
            if op["code"] == SIGNAL:
                sent.add((p["rank"], op["peer"], op["flag"], op["value"]))
    for p in plans:
        for op in p["ops"]:
            if op["code"] == WAIT and (op["peer"], p["rank"], op["flag"], op["value"]) not in sent:
                raise PlanError(f"rank {p['rank']} waits for {op} that rank {op['peer']} never sends")
