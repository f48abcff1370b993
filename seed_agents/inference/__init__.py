"""Central batched inference: the server, its batcher, and the environment runner.

Import `seed_agents.inference.runner` alone where TensorFlow must not load (runners).
"""
