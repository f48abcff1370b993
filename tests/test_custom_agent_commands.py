"""The REINFORCE example (`examples/custom_agent.py`), trained from its script in process
and as local processes, then used from the command line by its import path (its Ray run
is in tests/test_ray_backend.py, with every Ray of the tests).

`python examples/custom_agent.py` defines its builder in `__main__` (in `__mp_main__` in
local_mp's spawned nodes); `seed-agents eval`, `export`, `record`, `plot` and a resumed
run find it as `examples.custom_agent:ReinforceBuilder`.
"""

from __future__ import annotations

import pytest

from tests.example_runs import check_example


@pytest.mark.parametrize("backend", ["inprocess", "local_mp"])
def test_the_reinforce_example_is_used_from_the_command_line(tmp_path, backend):
    everything = backend == "local_mp"
    done = check_example(tmp_path, "custom_agent.py", backend, everything)
    assert done == (["train", "eval", "export", "record", "plot", "resume"] if everything
                    else ["train", "eval"])
