"""perfcheck workload: one KV-cached decoding step of a tiny torchtune Llama-3
decoder (2 layers, GQA), the way a compiled model is called once per
generated token: the caches are set up once and advance on every call."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from torchtune.models.llama3 import llama3

BATCH = 2
MAX_CACHE = 4096  # long enough for every call a perfcheck probe process makes


def _step_inputs(pos: int, device: str):
    gen = torch.Generator().manual_seed(pos)
    tokens = torch.randint(0, 256, (BATCH, 1), generator=gen)
    input_pos = torch.full((BATCH, 1), pos, dtype=torch.long)
    mask = torch.ones(BATCH, 1, MAX_CACHE, dtype=torch.bool)
    return {"tokens": tokens.to(device), "mask": mask.to(device), "input_pos": input_pos.to(device)}


def build(device: str):
    torch.manual_seed(0)
    model = (
        llama3(vocab_size=256, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, max_seq_len=MAX_CACHE)
        .to(device)
        .eval()
    )
    model.setup_caches(batch_size=BATCH, dtype=torch.float32, decoder_max_seq_len=MAX_CACHE)
    return model, _step_inputs(0, device), _step_inputs(1, device)
