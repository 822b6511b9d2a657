import sys
from pathlib import Path

import pytest
from torch import nn

from metalint.testing import assert_meta_init_parity

sys.path.insert(0, str(Path(__file__).parent / "probe_models"))
import configured_hook  # noqa: E402
import layers  # noqa: E402

sys.path.pop(0)


def test_passes_on_a_meta_safe_factory():
    assert_meta_init_parity(lambda: nn.Sequential(nn.Linear(8, 8), layers.LayerScaleTimm(8)))


def test_fails_with_a_readable_report():
    with pytest.raises(AssertionError) as info:
        assert_meta_init_parity(lambda: nn.Sequential(nn.Linear(8, 8), layers.LayerScaleDinov2(8)))
    text = str(info.value)
    assert "is not meta-safe with init='auto' on cpu" in text
    assert "1 of 3 tensors lost" in text
    assert "layers.py:14:9: MP001 `gamma` of LayerScaleDinov2 (1.gamma) lost its value" in text


def test_init_choice_is_honoured():
    with pytest.raises(AssertionError, match="reset_parameters"):
        assert_meta_init_parity(layers.ParentInit, init="reset_parameters")
    assert_meta_init_parity(layers.ParentInit, init="init_weights")


def test_configured_hooks_are_run():
    with pytest.raises(AssertionError, match="`theta` of RotaryEmbedding"):
        assert_meta_init_parity(configured_hook.make)
    assert_meta_init_parity(configured_hook.make, hooks=("rope_init",))
