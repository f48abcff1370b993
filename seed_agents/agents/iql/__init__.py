"""Implicit Q-learning (Kostrikov, Nair and Levine 2021): offline continuous control that
never evaluates an action the dataset lacks."""
