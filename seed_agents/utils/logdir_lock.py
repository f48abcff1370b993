"""One run at a time in a logdir: a second run (a `--resume` typed while the first still
trains, the same `--logdir` in two terminals) is refused before it writes anything.

Two runs in one logdir would overwrite each other's `run.json`, final-checkpoint record
and CSV logs, and save learner checkpoints from two different learners into one
directory: the run that was fine would lose what it had. The lock is an advisory
`flock` on `<logdir>/.lock`, taken by the driver (the process that writes `run.json`) and
held until the run returns; the operating system releases it when that process ends,
however it ends, so a crash leaves no stale lock to clean up. The file holds the holder's
pid and start time, for the error message only.

A logdir that is a URL (`gs://...`) has no lock: object storage offers none. Neither does
a filesystem whose `flock` is a no-op (some network mounts): there two drivers on
different machines are not kept apart.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import os
from collections.abc import Iterator

from seed_agents.utils import storage

LOCK_FILE = ".lock"


class LogdirInUseError(ValueError):
    """Another live process holds the logdir's lock. A ValueError, as the backends'
    other refusals of a logdir (`check_resume`), so the command line reports it alike."""


@contextlib.contextmanager
def hold_logdir(logdir: storage.PathLike | None) -> Iterator[None]:
    """Holds `logdir`'s lock while the block runs; creates the directory if needed.

    Raises LogdirInUseError at once (it never waits) when another process holds it; a
    logdir of None or a URL is not locked.
    """
    if not logdir or storage.is_url(logdir):
        yield
        return
    os.makedirs(logdir, exist_ok=True)
    path = os.path.join(os.fspath(logdir), LOCK_FILE)
    # os.open's descriptors are not inherited across exec (PEP 446): a subprocess the
    # run starts (Ray's daemons) never keeps the lock after the run has returned.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            raise LogdirInUseError(
                f"{logdir} is in use by another run ({_holder(fd)}): two runs in one "
                "logdir would overwrite each other's checkpoints and logs. Wait for it "
                "to end (or stop it), then --resume; or pass another logdir."
            ) from None
        os.ftruncate(fd, 0)
        started = datetime.datetime.now().isoformat(timespec="seconds")
        os.pwrite(fd, f"pid {os.getpid()}, started {started}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _holder(fd: int) -> str:
    """What the lock file says of its holder, or a plain word if it says nothing yet."""
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "a process that has not written its pid yet"
