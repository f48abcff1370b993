"""The agents' builders: components composed into agents."""

import seed_agents  # noqa: F401 - TF defaults (seed_agents/__init__.py) before a builder imports TF
