"""TensorFlow's oneDNN kernels are on wherever this package is imported before TF (TF
itself turns them on only on CPUs with AVX-512 VNNI, bfloat16 or AMX; on an AVX2-only CPU
they train `atari_ppo_large` 1.6 times as fast), and off where the user says so. Each case
is a fresh interpreter: TF reads the setting once, as it is imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _last_word_printed(code: str, setting: str | None = None) -> str:
    """Runs `code` in a fresh interpreter with TF_ENABLE_ONEDNN_OPTS unset (or `setting`)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    if setting is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = setting
    ran = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=600, check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return ran.stdout.split()[-1]


def _onednn_on(first_import: str, setting: str | None) -> bool:
    code = (f"import {first_import}\n"
            "from tensorflow.python.util import _pywrap_util_port\n"
            "print(_pywrap_util_port.IsMklEnabled())")
    return _last_word_printed(code, setting) == "True"


def test_onednn_is_on_after_importing_a_builder_and_off_where_the_user_says_so():
    # builders.transitions imports TF before anything of seed_agents: the package does first.
    assert _onednn_on("builders.transitions", None)
    assert not _onednn_on("seed_agents", "0")


# Records the setting as TensorFlow is first imported, whatever the CPU: TF turns oneDNN on
# by itself on some CPUs, so `_onednn_on` alone cannot tell an import order apart there.
_SETTING_AT_TF_IMPORT = """
import os, sys

class Watch:
    setting = None

    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" and Watch.setting is None:
            Watch.setting = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "unset")
        return None

sys.meta_path.insert(0, Watch())
import {module}
print(Watch.setting)
"""


@pytest.mark.parametrize("module", ["builders.transitions", "examples.dqn",
                                    "examples.custom_agent"])
def test_the_package_sets_tfs_defaults_before_tf_is_imported(module):
    # The examples a user copies from import TF themselves: after the package.
    assert _last_word_printed(_SETTING_AT_TF_IMPORT.format(module=module)) == "1"
