"""perfcheck workload: an e3nn equivariant MLP over per-node irreps features
(o3.Linear layers interleaved with Gate nonlinearities, whose scalar and
gate activations run through e3nn.nn.Activation), as in e3nn's Gate-based
networks."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import e3nn
import torch
from e3nn import o3
from e3nn.nn import Gate


def _gate():
    return Gate("16x0e", [torch.nn.functional.silu], "8x0e", [torch.sigmoid], "8x1o")


class EquivariantMLP(torch.nn.Module):
    def __init__(self, irreps_in="8x0e + 4x1o", irreps_out="4x0e + 2x1o"):
        super().__init__()
        g1, g2 = _gate(), _gate()
        self.lin1 = o3.Linear(irreps_in, g1.irreps_in)
        self.gate1 = g1
        self.lin2 = o3.Linear(g1.irreps_out, g2.irreps_in)
        self.gate2 = g2
        self.lin3 = o3.Linear(g2.irreps_out, irreps_out)

    def forward(self, x):
        x = self.gate1(self.lin1(x))
        x = self.gate2(self.lin2(x))
        return self.lin3(x)


def build(device: str):
    # e3nn's documented setting for torch.compile: no TorchScript codegen
    e3nn.set_optimization_defaults(jit_script_fx=False)
    torch.manual_seed(0)
    model = EquivariantMLP().to(device).eval()
    dim = o3.Irreps("8x0e + 4x1o").dim
    x = torch.randn(64, dim, generator=torch.Generator().manual_seed(0))
    return model, (x.to(device),)
