"""The backends that run an experiment's program: `inprocess` (every node a thread of this
process), `local_mp` (a spawned OS process per node), `ray` (a Ray actor per node, on one
machine or a cluster) and `offline` (a learner on a recorded dataset, no runners).

Each takes an `Experiment` and returns its `RunResult`; they share the program, its nodes,
the step limiter and the run's record from `launch/`, which imports none of them.
"""
