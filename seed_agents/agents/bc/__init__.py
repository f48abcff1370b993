"""Behaviour cloning: the dataset's actions as a supervised target."""
