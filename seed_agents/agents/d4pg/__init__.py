"""D4PG (Barth-Maron et al. 2018): distributed distributional deterministic policy gradients."""
