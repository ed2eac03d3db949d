"""perfcheck: performance and IR review of pull requests that touch PyTorch compiler paths."""

__version__ = "0.1.0"
