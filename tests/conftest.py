"""Shared fixtures: TensorFlow sized for a 2-core machine, and a small real policy."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from seed_agents.utils.tf_threads import configure_tf_threads  # noqa: E402

configure_tf_threads(1, 1)
