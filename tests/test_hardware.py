"""Precision chosen by the hardware, and the machine report every benchmark carries."""

from __future__ import annotations

import json
import warnings

import pytest

from seed_agents.utils import hardware
from seed_agents.utils.hardware import (
    PRECISION_CHOICES,
    choose_precision,
    parse_cpuinfo,
    resolve_precision,
)

# Abbreviated /proc/cpuinfo of the two kinds of machine this project has run on.
SAPPHIRE_RAPIDS = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu sse sse2 avx avx2 fma avx512f avx512bw avx512_bf16 amx_bf16 amx_tile amx_int8

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu sse sse2 avx avx2 fma avx512f avx512bw avx512_bf16 amx_bf16 amx_tile amx_int8
"""
EPYC_MILAN = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 sha_ni vaes vpclmulqdq
"""


def test_cpuinfo_gives_the_first_processors_model_and_flags():
    model, flags = parse_cpuinfo(SAPPHIRE_RAPIDS)
    assert model.startswith("Intel(R) Xeon(R) Platinum 8481C")
    assert {"avx2", "avx512f", "avx512_bf16", "amx_bf16"} <= flags
    model, flags = parse_cpuinfo(EPYC_MILAN)
    assert model == "AMD EPYC" and "avx2" in flags and "avx512f" not in flags
    assert parse_cpuinfo("") == ("", frozenset())


def test_auto_picks_bfloat16_only_where_it_is_native():
    _, native = parse_cpuinfo(SAPPHIRE_RAPIDS)
    _, emulated = parse_cpuinfo(EPYC_MILAN)
    on_native = choose_precision("auto", native, cpu="Xeon")
    assert (on_native.precision, on_native.native_bfloat16) == ("bfloat16", True)
    assert "avx512_bf16+amx_bf16" in on_native.reason
    on_avx2 = choose_precision("auto", emulated, cpu="AMD EPYC")
    assert (on_avx2.precision, on_avx2.native_bfloat16) == ("float32", False)
    assert "AMD EPYC has no avx512_bf16 or amx_bf16" in on_avx2.reason
    assert on_avx2.describe().startswith("precision: float32 (auto: AMD EPYC has no")
    # A GPU with bfloat16 (compute capability >= 8.0) decides whatever the CPU lacks.
    on_gpu = choose_precision("auto", emulated, ["NVIDIA H100 80GB HBM3"])
    assert on_gpu.precision == "bfloat16" and "H100" in on_gpu.reason
    # AMX alone (no AVX512_BF16 listed) is native too; a flag set of nothing is not.
    assert choose_precision("auto", {"amx_bf16"}).precision == "bfloat16"
    assert choose_precision("auto", set()).precision == "float32"


def test_explicit_precisions_are_kept_and_say_whether_bfloat16_is_native():
    _, emulated = parse_cpuinfo(EPYC_MILAN)
    forced = choose_precision("bfloat16", emulated)
    assert (forced.precision, forced.native_bfloat16) == ("bfloat16", False)
    assert forced.describe().startswith("precision: bfloat16 (as configured:")
    _, native = parse_cpuinfo(SAPPHIRE_RAPIDS)
    assert choose_precision("float32", native).precision == "float32"
    with pytest.raises(ValueError, match="auto"):
        choose_precision("float16", native)


def test_this_machine_resolves_auto_and_warns_for_emulated_bfloat16(monkeypatch):
    expected = choose_precision("auto", hardware.cpu_flags(), hardware.bfloat16_gpus(),
                                hardware.cpu_model())
    assert resolve_precision("auto") == expected
    monkeypatch.setattr(hardware, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        choice = resolve_precision("bfloat16")
        resolve_precision("bfloat16")  # once per process, not once per network
    slow = [w for w in caught if "slower than with float32" in str(w.message)]
    assert choice.precision == "bfloat16"
    assert len(slow) == (0 if choice.native_bfloat16 else 1)


def test_auto_networks_compute_in_the_resolved_precision():
    from seed_agents.agents.vtrace.networks import PolicyValueNetwork

    resolved = resolve_precision("auto").precision
    network = PolicyValueNetwork(3, (84, 84, 4), (16,), torso="nature_cnn", precision="auto")
    wanted = "bfloat16" if resolved == "bfloat16" else "float32"
    assert {layer.compute_dtype for layer in network._conv + network._torso} == {wanted}


def test_configs_take_every_precision_choice():
    from seed_agents.agents.r2d2.config import R2D2Config
    from seed_agents.agents.vtrace.config import VTraceConfig
    from seed_agents.agents.vtrace.presets import atari_cpu

    for config in (VTraceConfig, R2D2Config):
        for precision in PRECISION_CHOICES:
            assert config(precision=precision).precision == precision
    assert atari_cpu().precision == "auto"


def test_machine_report_names_the_cpu_flags_precision_and_reference_rates():
    from seed_agents.utils.reference import machine_report

    report = machine_report("auto")
    json.dumps(report)  # goes into a JSON line as it is
    assert report["cores"] >= 1 and report["cpu"]
    assert set(report["flags"]) >= {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}
    assert report["precision"] in ("float32", "bfloat16") and report["precision_reason"]
    assert report["tensorflow"].startswith("2.14")
    reference = report["reference"]
    assert reference["cartpole_steps_per_s"] > 0 and reference["nature_cnn_obs_per_s"] > 0
