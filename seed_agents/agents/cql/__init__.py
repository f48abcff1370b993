"""Discrete conservative Q-learning (CQL on double DQN): offline RL that improves on
the data while keeping its Q-values low off the data's actions."""
