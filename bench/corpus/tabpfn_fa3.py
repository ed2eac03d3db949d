"""perfcheck workload: a tiny randomly initialised TabPFN v3 (one layer,
48-dim embeddings) doing in-context classification: 15 labelled training
rows and 15 test rows, 5 features, 2 datasets in the batch."""

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(_ROOT / "src"))

import torch  # noqa: E402
from tabpfn.architectures import tabpfn_v3  # noqa: E402


def _data(n_train, n_test, gen, device):
    x = torch.randn(n_train + n_test, 2, 5, generator=gen) * 0.1
    y = torch.randint(0, 10, (n_train, 2), generator=gen).float()
    return x.to(device), y.to(device)


def build(device: str):
    torch.manual_seed(0)
    config = tabpfn_v3.TabPFNV3Config(
        max_num_classes=10,
        num_buckets=5,
        embed_dim=48,
        nlayers=1,
        icl_num_heads=3,
        dist_embed_num_heads=3,
        feat_agg_num_heads=3,
    )
    model = tabpfn_v3.get_architecture(config, cache_trainset_representation=False)
    model = model.to(device=device, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(0)
    return model, _data(15, 15, gen, device), _data(20, 20, gen, device)
