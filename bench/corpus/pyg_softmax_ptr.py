"""perfcheck workload: a graph classifier over a mini-batch of graphs in CSR
layout: SAGEConv node encoder, then an AttentionalAggregation readout that
is given the batch's `ptr` (segment softmax over each graph's nodes)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from torch_geometric.nn import SAGEConv
from torch_geometric.nn.aggr import AttentionalAggregation


class GraphClassifier(torch.nn.Module):
    def __init__(self, in_channels=8, hidden=32, num_classes=3):
        super().__init__()
        self.conv1 = SAGEConv(in_channels, hidden)
        self.conv2 = SAGEConv(hidden, hidden)
        self.pool = AttentionalAggregation(
            gate_nn=torch.nn.Linear(hidden, 1), nn=torch.nn.Linear(hidden, hidden)
        )
        self.lin = torch.nn.Linear(hidden, num_classes)

    def forward(self, x, edge_index, ptr):
        x = self.conv1(x, edge_index).relu()
        x = self.conv2(x, edge_index).relu()
        x = self.pool(x, ptr=ptr, dim_size=ptr.numel() - 1)
        return self.lin(x)


def _batch(sizes, gen, device):
    xs, eis, off = [], [], 0
    for n in sizes:
        xs.append(torch.randn(n, 8, generator=gen))
        eis.append(torch.randint(0, n, (2, 3 * n), generator=gen) + off)
        off += n
    ptr = torch.tensor([0, *sizes]).cumsum(0)
    return tuple(t.to(device) for t in (torch.cat(xs), torch.cat(eis, 1), ptr))


def build(device: str):
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = GraphClassifier().to(device).eval()
    return (model, _batch([12, 16, 9, 14], gen, device), _batch([10, 7, 15], gen, device))
