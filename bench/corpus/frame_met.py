"""perfcheck workload: FTTransformer on a TensorFrame with numerical and
multi-categorical columns (MultiCategoricalEmbeddingEncoder slices the
MultiNestedTensor per column inside forward)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from torch_frame import stype
from torch_frame.data import MultiNestedTensor, TensorFrame
from torch_frame.data.stats import StatType
from torch_frame.nn import LinearEncoder, MultiCategoricalEmbeddingEncoder
from torch_frame.nn.models import FTTransformer

NUM_COLS = ["age", "income", "score"]
MC_COLS = ["tags", "genres"]
NUM_CATS = 6


def _frame(num_rows: int, gen: torch.Generator, device: str) -> TensorFrame:
    num = torch.randn(num_rows, len(NUM_COLS), generator=gen)
    rows = []
    for _ in range(num_rows):
        row = []
        for _ in MC_COLS:
            k = int(torch.randint(1, 4, (1,), generator=gen))
            row.append(torch.randint(0, NUM_CATS, (k,), generator=gen).tolist())
        rows.append(row)
    mnt = MultiNestedTensor.from_tensor_mat([[torch.tensor(c) for c in row] for row in rows])
    return TensorFrame(
        feat_dict={stype.numerical: num, stype.multicategorical: mnt},
        col_names_dict={stype.numerical: NUM_COLS, stype.multicategorical: MC_COLS},
    ).to(device)


def build(device: str):
    gen = torch.Generator().manual_seed(0)
    col_stats = {
        c: {StatType.MEAN: 0.0, StatType.STD: 1.0, StatType.QUANTILES: [-2.0, -1.0, 0.0, 1.0, 2.0]}
        for c in NUM_COLS
    }
    cats = [f"c{i}" for i in range(NUM_CATS)]
    for c in MC_COLS:
        col_stats[c] = {StatType.MULTI_COUNT: (cats, [10] * NUM_CATS)}
    tf = _frame(32, gen, device)
    torch.manual_seed(0)
    model = (
        FTTransformer(
            channels=32,
            out_channels=2,
            num_layers=2,
            col_stats=col_stats,
            col_names_dict=tf.col_names_dict,
            stype_encoder_dict={
                stype.numerical: LinearEncoder(),
                stype.multicategorical: MultiCategoricalEmbeddingEncoder(),
            },
        )
        .to(device)
        .eval()
    )
    return model, (tf,), (_frame(16, gen, device),)
