"""A failed guard's value is placed in the class of the object that holds it (issue 54): its type's
MRO in the probe process, each class by its own code objects' lines, never by searching the
tree's source for text a sibling class shares. A real review of small real models (aot_eager)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ReviewFn, write_tree

NODE = """\
import torch
from torch import nn


class Node(nn.Module):
    def forward(self, x):
        {update}
        return torch.relu(self.syn)
"""

# Two subclasses in files of their own that register the buffer alike; the model uses the second.
SUBCLASS = """\
import torch

from neurons.node import Node


class {name}(Node):
    def __init__(self):
        super().__init__()
        self.register_buffer("syn", torch.zeros(1))
"""

NET = """\
import torch
from torch import nn

from neurons.leaky import Leaky


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.neuron = Leaky()

    def forward(self, x):
        return self.neuron(self.fc(x))


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(4, 8).to(device),)
"""

ALONE = """\
import torch

from neurons.leaky import Leaky


def build(device):
    return Leaky().to(device), (torch.randn(4, 8).to(device),)
"""


def _tree(root: Path, update: str, model: str) -> Path:
    return write_tree(
        root,
        {
            "neurons/__init__.py": "",
            "neurons/node.py": NODE.replace("{update}", update),
            "neurons/adaptive.py": SUBCLASS.replace("{name}", "Adaptive"),
            "neurons/leaky.py": SUBCLASS.replace("{name}", "Leaky"),
            "model.py": model,
        },
    )


@pytest.mark.parametrize(
    ("model", "frame"),
    [(NET, "the model's forward, through its submodule"), (ALONE, "the subclass's inherited forward")],
)
def test_a_guard_on_an_instance_of_a_subclass_is_placed_in_the_subclass_s_file(
    review: ReviewFn, tmp_path: Path, model: str, frame: str
) -> None:
    """Head keeps the membrane state in the registered buffer, which takes the batch's shape at the
    first step: a new recompile, on ``self...._buffers['syn']``. The model's neuron is a Leaky:
    placed at Leaky's registration (neurons/leaky.py), not Adaptive's, which reads the same and
    sorts first."""
    base = _tree(tmp_path / "base", "self.syn2 = self.syn * 0.9", model)
    head = _tree(tmp_path / "head", "self.syn = self.syn * 0.9 + x", model)
    result = review(base, head, probes=("compile",))
    placed = [
        f for f in result.findings if f.category == "recompile" and "syn" in str(f.evidence.get("reason"))
    ]
    assert placed, (frame, [f.message for f in result.findings])
    [recompile] = placed
    assert recompile.location is not None
    assert (recompile.location.path, recompile.location.function) == ("neurons/leaky.py", "Leaky.__init__"), (
        frame
    )
    assert recompile.location.code == 'self.register_buffer("syn", torch.zeros(1))'
