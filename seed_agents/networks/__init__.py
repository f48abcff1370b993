"""Networks and their parts: what maps observations to features, values and actions.

Use a torso by name for observations (`make_torso`: "mlp", "nature_cnn",
"impala_resnet", "minatar_cnn"; `embed` runs it, `recurrent_unroll` adds an LSTM over
time), `mlp` for the dense stacks of flat (control) states and critics (ReLU, or
Acme's `LayerNormMLP` with `layer_norm=True`, which the actors and critics take too),
`QNetwork` for
Q-values over discrete actions, `DeterministicActor`, `Critics` and `CategoricalCritic`
for continuous-action actor-critics (`make_variables` before a target copy, `follow` for
the copy itself), `GaussianActor` for a diagonal Gaussian policy (MPO, IQL),
`ObservationNormalizer` when vector observations need running standardization, and
`update_target` for every target network (a copy on a period, or Polyak averaging each
step). An agent's own network is a `tf.Module` built
from these in its package (`seed_agents/agents/<agent>/networks.py`).
"""

from seed_agents.networks.actor_critic import (
    CategoricalCritic,
    Critics,
    DeterministicActor,
    follow,
    make_variables,
)
from seed_agents.networks.gaussian import GaussianActor
from seed_agents.networks.mlp import critic_input, flatten_observation, mlp, run
from seed_agents.networks.normalization import ObservationNormalizer
from seed_agents.networks.q_network import QNetwork
from seed_agents.networks.target_updates import update_target
from seed_agents.networks.torsos import (
    PRECISIONS,
    TORSOS,
    check_torso,
    check_torso_observation,
    embed,
    make_torso,
    recurrent_unroll,
    torso_dtype,
)

__all__ = [
    "PRECISIONS", "TORSOS", "CategoricalCritic", "Critics", "DeterministicActor", "GaussianActor",
    "ObservationNormalizer",
    "QNetwork", "check_torso", "check_torso_observation", "critic_input", "embed",
    "flatten_observation", "follow", "make_torso", "make_variables", "mlp",
    "recurrent_unroll", "run", "torso_dtype", "update_target",
]
