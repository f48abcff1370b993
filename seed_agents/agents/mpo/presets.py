"""Named MPO settings, as the `key=value` strings `--set` takes (see
`seed_agents.agents.vtrace.presets` for why strings)."""

from __future__ import annotations

ACME_BASELINE: tuple[str, ...] = (
    "epsilon_mean=0.01",
    "learning_rate=3e-4",
    "n_step=4",
    "init_scale=0.5",
)
"""The values of Acme's newer continuous-control baseline (JAX:
examples/baselines/rl_continuous/run_mpo.py) where they differ from its TF agent's, this
agent's defaults: the mean's KL bound 0.01 (TF: 2.5e-3), Adam at 3e-4 for the policy and
the critic (TF: 1e-4), 4-step returns (TF: 5), the policy's standard deviation starting at
0.5 (TF's control example: 0.7). The baseline's other differences stay this agent's: its
three-layer networks, and samples_per_insert 64 (one update per 4 env steps at batch 256;
here one per env step, as the other continuous agents)."""

DMPO: tuple[str, ...] = (*ACME_BASELINE, "critic_type=categorical")
"""`acme_baseline` with Acme's distributional critic (DMPO: 51 atoms on [-150, 150], the
target the mixture of the target critic's distributions at the sampled next actions; the
JAX baseline's `CriticType.CATEGORICAL`). On walker-walk at 100K env steps, seeds 0 / 1 / 2:
952.4 / 810.1 / 683.0 where `acme_baseline` had 575.9 and 660.1 (seeds 0 and 1), and State
SAC 891 (docs/continuous-control.md). An update costs ~1.5 times the nondistributional one here:
the target critic's last layer gives 51 logits at each of num_samples x batch pairs."""

DMPO_LARGE: tuple[str, ...] = (
    *DMPO,
    "actor_hidden_sizes=256,256,256",
    "critic_hidden_sizes=512,512,256",
)
"""`dmpo` with the layer sizes of Acme's MPO control networks (policy 256-256-256, critic
512-512-256; plain ReLU layers, since Acme's LayerNorm kind was slower on finger-spin here).
An update costs ~2.4 times `dmpo`'s (the 512-wide critic at 20 x 256 sampled pairs): ~22
updates/s on two cores, ~66 minutes per 100K env steps. At 100K env steps: finger-spin
seeds 0 / 1 826.2 / 916.3, both above State SAC's 811 (`dmpo`: 926.0 / 762.3); reacher-easy
seeds 0 / 1 / 2 693.7 / 771.7 / 938.9, median 771.7 against its 746 (`dmpo`: 970.2 / 897.5 /
959.6): two of the three tasks above State SAC at 100K under this one preset (walker-walk
not run with it). All figures: docs/continuous-control.md."""

MPO_PRESETS: dict[str, tuple[str, ...]] = {
    "acme_baseline": ACME_BASELINE,
    "dmpo": DMPO,
    "dmpo_large": DMPO_LARGE,
}
"""The presets by the name `--preset` takes."""
