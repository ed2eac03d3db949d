"""perfcheck workload: a graph classifier that encodes nodes with SAGEConv,
packs each mini-batch of graphs into a dense [B, N_max, F] tensor with
to_dense_batch (fixed batch_size / max_num_nodes, as for padded batches) and
runs masked self-attention over each graph's nodes + a masked mean readout."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from torch_geometric.nn import SAGEConv
from torch_geometric.utils import to_dense_batch

BATCH_SIZE = 4
MAX_NODES = 16


class DenseGraphClassifier(torch.nn.Module):
    def __init__(self, in_channels=8, hidden=32, num_classes=3):
        super().__init__()
        self.conv1 = SAGEConv(in_channels, hidden)
        self.conv2 = SAGEConv(hidden, hidden)
        self.attn = torch.nn.MultiheadAttention(hidden, 4, batch_first=True)
        self.lin = torch.nn.Linear(hidden, num_classes)

    def forward(self, x, edge_index, batch):
        x = self.conv1(x, edge_index).relu()
        x = self.conv2(x, edge_index).relu()
        h, mask = to_dense_batch(x, batch, batch_size=BATCH_SIZE, max_num_nodes=MAX_NODES)
        a, _ = self.attn(h, h, h, key_padding_mask=~mask, need_weights=False)
        h = h + a
        h = (h * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
        return self.lin(h)


def _batch(sizes, gen, device):
    xs, eis, bs, off = [], [], [], 0
    for g, n in enumerate(sizes):
        xs.append(torch.randn(n, 8, generator=gen))
        e = torch.randint(0, n, (2, 3 * n), generator=gen) + off
        eis.append(e)
        bs.append(torch.full((n,), g, dtype=torch.long))
        off += n
    return tuple(t.to(device) for t in (torch.cat(xs), torch.cat(eis, 1), torch.cat(bs)))


def build(device: str):
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = DenseGraphClassifier().to(device).eval()
    return (model, _batch([12, 16, 9, 14], gen, device), _batch([10, 7, 15, 11], gen, device))
