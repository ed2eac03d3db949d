"""perfcheck workload: the e3nn point-convolution pattern (spherical harmonics
of edge vectors, smooth_finite radial basis with cutoff, FullyConnectedNet
weights for a FullyConnectedTensorProduct, scatter onto nodes)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import e3nn
import torch
from e3nn import o3
from e3nn.math import soft_one_hot_linspace
from e3nn.nn import FullyConnectedNet, Gate


class PointConv(torch.nn.Module):
    def __init__(self, irreps_in, irreps_out, max_radius=1.8, num_basis=8):
        super().__init__()
        self.irreps_in = o3.Irreps(irreps_in)
        self.lmax_list = [0, 1, 2]
        self.irreps_sh = o3.Irreps.spherical_harmonics(2)
        self.irreps_out = o3.Irreps(irreps_out)
        self.max_radius = max_radius
        self.num_basis = num_basis
        self.tp = o3.FullyConnectedTensorProduct(
            self.irreps_in, self.irreps_sh, self.irreps_out, shared_weights=False
        )
        self.fc = FullyConnectedNet([num_basis, 16, self.tp.weight_numel], torch.relu)

    def forward(self, x, pos, edge_src, edge_dst):
        edge_vec = pos[edge_src] - pos[edge_dst]
        sh = o3.spherical_harmonics(self.lmax_list, edge_vec, True, normalization="component")
        emb = soft_one_hot_linspace(
            edge_vec.norm(dim=1), 0.0, self.max_radius, self.num_basis, basis="smooth_finite", cutoff=True
        ).mul(self.num_basis**0.5)
        msg = self.tp(x[edge_src], sh, self.fc(emb))
        out = msg.new_zeros(x.shape[0], msg.shape[1]).index_add(0, edge_dst, msg)
        return out / 3.0


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        gate = Gate("8x0e", [torch.relu], "4x0e", [torch.sigmoid], "4x1o")
        self.conv1 = PointConv("4x0e", gate.irreps_in)
        self.gate = gate
        self.conv2 = PointConv(gate.irreps_out, "2x0e")

    def forward(self, x, pos, edge_src, edge_dst):
        h = self.gate(self.conv1(x, pos, edge_src, edge_dst))
        return self.conv2(h, pos, edge_src, edge_dst)


def _graph(num_nodes, num_edges, gen, device):
    x = torch.randn(num_nodes, 4, generator=gen)
    pos = torch.rand(num_nodes, 3, generator=gen) * 2.0
    src = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    dst = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    return tuple(t.to(device) for t in (x, pos, src, dst))


def build(device: str):
    # e3nn's documented setting for torch.compile: no TorchScript codegen
    e3nn.set_optimization_defaults(jit_script_fx=False)
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = Net().to(device).eval()
    return model, _graph(24, 96, gen, device), _graph(12, 48, gen, device)
