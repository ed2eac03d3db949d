"""The review's compile-latency stage: callgrind's counted compiles, the timing workers'
cache-cold samples joined to the compile results, and more pairs where the wall clock left a
workload undecided."""
