"""Soft Actor-Critic (Haarnoja et al. 2018), SEED RL's continuous-control agent."""
