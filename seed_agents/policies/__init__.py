"""Policies: what the inference server calls on each batch of observations.

Pick the shell by how the agent acts: `EpsilonGreedyPolicy` over Q-values (discrete; a
fixed epsilon or a `LinearSchedule` of the run's env steps), `ContinuousPolicy` for
actions in [-1, 1]^d (subclass it with the sampling: SAC's Gaussian, D4PG's noise), and
`FeedForwardPolicy` for any other stateless policy (subclass it with `_act`). Recurrent
and per-environment policies (V-trace's categorical sampling with an LSTM, R2D2's Ape-X
epsilons) live in their agents and build their steps from `step_signature`,
`random_generator`, `zero_state` and `to_numpy`. Every policy implements
`seed_agents.core.Policy`.
"""

from seed_agents.policies.continuous import ContinuousPolicy
from seed_agents.policies.epsilon_greedy import Epsilon, EpsilonGreedyPolicy
from seed_agents.policies.feedforward import FeedForwardPolicy
from seed_agents.policies.inputs import random_generator, step_signature, to_numpy, zero_state
from seed_agents.policies.schedules import LinearSchedule

__all__ = [
    "ContinuousPolicy", "Epsilon", "EpsilonGreedyPolicy", "FeedForwardPolicy",
    "LinearSchedule", "random_generator", "step_signature", "to_numpy", "zero_state",
]
