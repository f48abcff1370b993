"""Named TD3 settings, as the `key=value` strings `--set` takes (see
`seed_agents.agents.vtrace.presets` for why strings)."""

from __future__ import annotations

TD3_BC: tuple[str, ...] = (
    "bc_alpha=2.5",
    "batch_size=256",
    "learning_rate=3e-4",
    "policy_noise=0.2",
    "noise_clip=0.5",
    "policy_delay=2",
    "tau=0.005",
    "discount=0.99",
)
"""TD3+BC (Fujimoto and Gu 2021, their Table 3) for `train --agent td3 --dataset DIR`:
TD3's own settings with the actor's loss alpha / mean|Q| * Q minus the squared distance to
the dataset's action, alpha 2.5. The paper also standardizes observations with the
dataset's mean and deviation; this preset does not (our offline runs feed the dataset's
observations as the environment gives them)."""

TD3_PRESETS: dict[str, tuple[str, ...]] = {"td3_bc": TD3_BC}
"""The presets by the name `--preset` takes."""
