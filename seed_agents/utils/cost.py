"""What frames cost: CPU core-seconds per million emulator frames, and dollars at a price
per vCPU-hour.

CPU time, unlike wall time, barely moves when other programs share the cores, so the
core-seconds a million frames take are comparable across machines of one kind and across
runs on a busy one; a cloud bills a vCPU whether it computes or waits, so the dollars here
are a floor (cores kept busy). The benchmarks print both for central inference and for
IMPALA-style acting in the same run (`cost_vs_impala`).
"""

from __future__ import annotations

USD_PER_VCPU_HOUR = 0.0408
"""AWS EC2 on-demand, Linux, us-east-1: m7g.large (2 vCPU) at $0.0816/h, as quoted in
June 2026 (factualminds.com, "Amazon EC2 On-Demand Pricing: Instance Families, Regional
Multipliers, and the Graviton Crossover (2026)"): $0.0408 per vCPU-hour. A flag of each
benchmark changes it (`--usd-per-vcpu-hour`)."""

PRICE_SOURCE = ("AWS EC2 on-demand m7g.large, Linux, us-east-1: $0.0816/h for 2 vCPU "
                "(June 2026, as quoted by factualminds.com)")


def core_seconds_per_million_frames(cpu_ms_per_step: float, frames_per_step: int) -> float:
    """Core-seconds a million emulator frames take at `cpu_ms_per_step` CPU milliseconds
    per agent step of `frames_per_step` frames (Atari's action repeat: 4)."""
    if frames_per_step < 1:
        raise ValueError(f"frames_per_step must be >= 1, got {frames_per_step}.")
    return cpu_ms_per_step / 1e3 * 1e6 / frames_per_step


def usd(core_seconds: float, usd_per_vcpu_hour: float = USD_PER_VCPU_HOUR) -> float:
    """Dollars for `core_seconds` of vCPU time at `usd_per_vcpu_hour`."""
    if not usd_per_vcpu_hour >= 0:
        raise ValueError(f"usd_per_vcpu_hour must be >= 0, got {usd_per_vcpu_hour}.")
    return core_seconds / 3600.0 * usd_per_vcpu_hour


def process_tree_cpu_s() -> float:
    """CPU seconds (user + system) of this process and of every child it has waited for
    (and theirs): read before and after a run whose processes have all ended, the
    difference is what the run cost. Children still running are not counted."""
    import resource

    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total
