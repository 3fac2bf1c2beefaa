"""torchtpu.testing.hf_device_spec selects tpu in Transformers' and Diffusers' test utilities.

Each check runs in a fresh interpreter (the suites read the variables when their testing module
is first imported) from a folder where `python -m torchtpu.testing.hf_device_spec` wrote the
spec file, exactly as a user runs those suites from their source trees.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("diffusers")

from torchtpu.testing import hf_device_spec  # noqa: E402


def test_module_writes_the_spec_file_and_prints_the_variables(tmp_path, capsys):
    # What `python -m torchtpu.testing.hf_device_spec <folder>` runs.
    assert hf_device_spec.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / hf_device_spec.SHIM_NAME).read_text() == hf_device_spec.SHIM_TEXT
    assert ("export TRANSFORMERS_TEST_DEVICE=tpu TRANSFORMERS_TEST_BACKEND=torchtpu "
            "TRANSFORMERS_TEST_DEVICE_SPEC=torchtpu_device_spec.py") in out
    assert "export DIFFUSERS_TEST_DEVICE=tpu" in out
    with pytest.raises(ValueError, match="prefix"):
        hf_device_spec.environment("JAX")


CHECK = """
import os
os.chdir({folder!r})
import torch
from transformers import testing_utils as tu
from diffusers.utils import testing_utils as du

assert tu.torch_device == "tpu" and du.torch_device == "tpu", (tu.torch_device, du.torch_device)
for utils in (tu, du):
    assert utils.backend_device_count("tpu") == torch.tpu.device_count() == 4
    utils.backend_manual_seed("tpu", 7)
    a = torch.rand(5, device="tpu").cpu()
    utils.backend_manual_seed("tpu", 7)
    b = torch.rand(5, device="tpu").cpu()
    assert torch.equal(a, b)
    utils.backend_empty_cache("tpu")
x = torch.ones(1024, device="tpu")
du.backend_reset_peak_memory_stats("tpu")
assert du.backend_max_memory_allocated("tpu") >= 4096
assert du.backend_supports_training("tpu")
print("ok")
"""


def test_suites_pick_tpu_from_the_spec(tmp_path, run_python):
    hf_device_spec.write_shim(tmp_path)
    env = {**hf_device_spec.environment("TRANSFORMERS"), **hf_device_spec.environment("DIFFUSERS")}
    out = run_python(CHECK.format(folder=str(tmp_path)), timeout=300, **env)
    assert out.stdout.strip().endswith("ok")
