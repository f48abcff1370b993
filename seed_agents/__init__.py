"""seed-agents: RL agents built from components in the SEED RL architecture.

The package holds the parts (interfaces, environments, replay, central inference,
algorithms, utilities). It knows nothing about processes: `builders/` turns parts into
agents and `launch/` runs them.
"""

__version__ = "0.1.0"
