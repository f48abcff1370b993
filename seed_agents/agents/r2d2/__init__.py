"""R2D2 (Kapturowski et al., 2019): recurrent Q-learning from prioritized sequence replay."""
