"""Maximum a Posteriori Policy Optimisation (Abdolmaleki et al. 2018), with the decoupled KL
constraints of "Relative Entropy Regularized Policy Iteration" (2018), as Acme's TF agent."""
