"""Twin Delayed DDPG (Fujimoto et al. 2018), and TD3+BC (Fujimoto and Gu 2021) with `bc_alpha`."""
