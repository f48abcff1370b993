"""What more than one agent uses; each agent package (vtrace, r2d2, sac, d4pg, bc, cql)
imports from here and never from another agent's package.

  * networks: observation torsos by name (`torsos`), running observation
    normalization (`observation_normalization`), the MLPs and critics of continuous
    control (`continuous_networks`), target networks (`target_networks`);
  * policies: what every policy's batched step takes and gives back (`policy_inputs`),
    the shells of the continuous-action (`continuous_policy`: SAC, D4PG) and offline
    (`feedforward_policy`: BC, CQL) policies;
  * learning: a learner's supply of batches (`batches`), optimizers built with their
    slots when the learner is made (`optimizers`), the shell of the n-step transition
    learners (`transition_learning`);
  * configs: the settings the transition agents share (`replay_config`) and those the
    offline agents share (`offline_config`).
"""
