"""seed-agents: RL agents built from components in the SEED RL architecture.

The package holds the parts (interfaces, environments, replay, central inference,
algorithms, utilities). It knows nothing about processes: `builders/` turns parts into
agents and `launch/` runs them.
"""

import os

# TensorFlow 2.14 turns its oneDNN kernels on by default only on CPUs with AVX-512 VNNI,
# bfloat16 or AMX. On an AVX2-only CPU they train `atari_ppo_large`'s ResNet 1.6 times as
# fast as TF's own kernels, and its policy step 1.05 times (`benchmarks/onednn.py`, a
# 2-core AMD EPYC). TF reads this once, as it is imported: set here, before any module
# of this package imports TF, and inherited by the processes a launcher starts. A user's
# `TF_ENABLE_ONEDNN_OPTS=0` keeps TF's own kernels.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

__version__ = "0.1.0"
