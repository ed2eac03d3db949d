"""What Dynamo and Inductor say of their own work, read from their logs and counters as a probe
compiles: graph breaks as events, recompile-limit hits, compile-time splits."""
