"""The ranks of the probes that need several (`ddp`, `fsdp`), launched with torchrun, and what
they read of their collectives and compiled graphs."""
