"""A plugin probe written the way a third party would, for tests/test_plugins.py: a torch-free
descriptor (probe.py) and a run function (run.py) that only the probe's worker imports."""
