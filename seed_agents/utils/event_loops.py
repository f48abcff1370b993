"""The event loop the inference service (and anything else pumping many gRPC streams)
runs on. Imports neither TensorFlow nor gRPC: runner-side processes use it too."""

from __future__ import annotations

import asyncio
import os

ENV_VAR = "SEED_AGENTS_EVENT_LOOP"
"""Set to "asyncio" to serve on asyncio's own loop even where uvloop is installed (its
debug mode, a suspected uvloop problem)."""

def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where it is installed (Linux and macOS), asyncio's otherwise.

    Every stream's messages pass through this one loop: per message it runs gRPC's
    completions and a few steps of the stream's handler, and uvloop's loop (libuv, in C)
    dispatches them for less than asyncio's own. With 1,024 streams of 4 environments on
    2 cores (runner_scale.py, its clients on the same loop), three alternating pairs of
    15-second windows served 22.9-28.0K observations/s on uvloop against 21.7-22.6K on
    asyncio's loop (1.14x on average), at 0.92x the server's CPU per message.
    """
    choice = os.environ.get(ENV_VAR, "uvloop")
    if choice not in ("uvloop", "asyncio"):
        raise ValueError(f"{ENV_VAR} must be 'uvloop' or 'asyncio', got {choice!r}.")
    if choice == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()
