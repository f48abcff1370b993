"""TD3 hyperparameters, checked when built."""

from __future__ import annotations

import dataclasses

from seed_agents.configs.transitions import ActorCriticConfig


@dataclasses.dataclass(frozen=True)
class TD3Config(ActorCriticConfig):
    """Everything the TD3 builder, learner and policy need to agree on.

    The defaults are the TD3 paper's and CleanRL's `td3_continuous_action`: two layers of
    256, Adam at 3e-4, batches of 256, Polyak averaging at 0.005, one critic update per
    env step, the actor and the targets every second one, target smoothing noise 0.2
    clipped at 0.5, exploration noise 0.1, and uniformly random actions until the
    learner's first update (`min_replay_size`, CleanRL's `learning_starts` 25K).
    Replay, acting and network fields are `ActorCriticConfig`'s.

    TD3's own:
      sigma: standard deviation of the Gaussian exploration noise on the actions
        (clipped back into [-1, 1]); evaluation environments act without it.
      policy_noise, noise_clip: the target action's smoothing noise and its clip.
      policy_delay: the actor and the target networks are updated every this many
        critic updates (2: the paper's d).
      bc_alpha: None for TD3; a number makes the actor's loss TD3+BC's (offline data:
        the deterministic policy gradient scaled by bc_alpha / mean |Q|, plus the squared
        distance to the data's action; Fujimoto and Gu use 2.5).
    """

    min_replay_size: int = 25_000
    sigma: float = 0.1
    policy_noise: float = 0.2
    noise_clip: float = 0.5
    policy_delay: int = 2
    bc_alpha: float | None = None

    def __post_init__(self):
        super().__post_init__()
        for name in ("sigma", "policy_noise", "noise_clip"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}.")
        if self.policy_delay < 1:
            raise ValueError(f"policy_delay must be >= 1, got {self.policy_delay}.")
        if self.bc_alpha is not None and self.bc_alpha <= 0:
            raise ValueError(f"bc_alpha must be > 0 or None, got {self.bc_alpha}.")
