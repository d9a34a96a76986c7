"""DDP on CPU over the backend under test ends where DDP over gloo ends.

Both runs share the spawned ranks: the default group uses the backend under
test, a second group uses gloo, and each wraps its own copy of the same model.

    python -m pytest test/cpu/test_ddp_cpu.py -q
"""
import copy

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.testing._internal.common_utils import run_tests

from mp_util import DistTestCase, spawned

STEPS = 6


def build_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 4))


class DDPCases:
    @spawned
    def test_ddp_matches_gloo(self):
        gloo = dist.new_group(backend="gloo")
        # Ranks start from different weights: DDP must broadcast rank 0's.
        model = build_model(seed=self.rank)
        runs = []
        for group in (None, gloo):  # None: the default group, i.e. the backend under test
            # A tiny bucket cap gives one all-reduce per parameter; BatchNorm's
            # buffers are broadcast from rank 0 at every forward.
            ddp = DDP(copy.deepcopy(model), process_group=group, bucket_cap_mb=0.001)
            runs.append((ddp, torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)))

        g = torch.Generator().manual_seed(100 + self.rank)  # each rank its own data
        for _ in range(STEPS):
            x, y = torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)
            for ddp, opt in runs:
                opt.zero_grad()
                F.mse_loss(ddp(x), y).backward()
                opt.step()

        (ddp, _), (ref, _) = runs
        for (name, p), q in zip(ddp.module.state_dict().items(), ref.module.state_dict().values()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6,
                                       msg=lambda m, name=name: f"rank {self.rank} {name}: {m}")
        # And every rank holds the same parameters (checked over gloo).
        flat = torch.cat([p.detach().flatten() for p in ddp.module.parameters()])
        everyone = [torch.empty_like(flat) for _ in range(self.world_size)]
        dist.all_gather(everyone, flat, group=gloo)
        for r, other in enumerate(everyone):
            torch.testing.assert_close(
                other, flat, rtol=0, atol=0,
                msg=lambda m, r=r: f"rank {r} differs from rank {self.rank}: {m}")


class TestDDPWorld2(DDPCases, DistTestCase):
    WORLD_SIZE = 2


class TestDDPWorld3(DDPCases, DistTestCase):
    WORLD_SIZE = 3


if __name__ == "__main__":
    run_tests()
