"""The REINFORCE example (`examples/custom_agent.py`), trained from its script in process
and as local processes, then used from the command line by its import path (its Ray run
is in tests/test_ray_backend.py, with every Ray of the tests).

`python examples/custom_agent.py` defines its builder in `__main__` (in `__mp_main__` in
local_mp's spawned nodes); `seed-agents eval`, `plot` and a resumed run find it as
`examples.custom_agent:ReinforceBuilder` (`export` and `record`, which load a builder the
same way, run on the DQN example's run in tests/test_dqn_example.py).
"""

from __future__ import annotations

import pytest

from tests.example_runs import check_example


@pytest.mark.parametrize("backend", ["inprocess", "local_mp"])
def test_the_reinforce_example_is_used_from_the_command_line(tmp_path, backend):
    # Plot and resume here; export and record on the DQN example's run.
    after = ("plot", "resume") if backend == "local_mp" else ()
    done = check_example(tmp_path, "custom_agent.py", backend, after)
    assert done == ["train", "eval", *after]
