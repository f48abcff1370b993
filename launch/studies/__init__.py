"""Many runs as one study: sweeps of seeds and settings (`sweeps`), searches over
settings that stop poor trials early (`tuning`), runs on disk read as results
(`results`), and their comparison with confidence intervals (`comparing`).

Below the command line (`launch.commands` calls these), above the deployment core: a
sweep's runs are `seed-agents train` processes, handed in by the command line.
"""
