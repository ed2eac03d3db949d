"""Step time over pairs of worker processes, base beside head, until the timing gate decides;
the worker that runs in each process and the figures it reads."""
