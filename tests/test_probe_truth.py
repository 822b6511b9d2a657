"""The probe decides whether a value is random from how it was made, never from its values."""

from __future__ import annotations

import random
from typing import Literal, Optional, Tuple, Union

import torch
from torch import nn

from metalint.probe.build import probe


class RandomScalar(nn.Module):
    """A random 1-element parameter (min == max), re-drawn by its reset hook."""

    def __init__(self):
        super().__init__()
        self.alpha = nn.Parameter(torch.empty(1))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.normal_(self.alpha)


class PythonRandom(nn.Module):
    """Random through Python's ``random`` (no torch op the recorder sees), re-drawn the same way."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.empty(64))
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            self.w.copy_(torch.tensor([random.gauss(0.0, 1.0) for _ in range(64)]))


class ConstantScalarLost(nn.Module):
    """A deterministic 1-element value nothing re-creates: still lost."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.full((1,), 2.5))
        self.fc = nn.Linear(2, 2)


class CrossDecoder(nn.Module):
    """open_clip's idiom: a projection allocated with ``torch.empty`` whose
    ``init_parameters()`` nothing calls (nor any hook): eager construction leaves it as
    uninitialised memory, exactly as ``to_empty()`` does, so there is no value to lose."""

    def __init__(self, width=8, output_dim=4):
        super().__init__()
        self.ln_final = nn.LayerNorm(width)
        self.text_projection = nn.Parameter(torch.empty(width, output_dim))
        self.logit_bias = nn.Parameter(self.text_projection.new_empty(output_dim))

    def init_parameters(self):
        nn.init.normal_(self.text_projection, std=self.ln_final.normalized_shape[0] ** -0.5)


class CrossDecoderInitialised(CrossDecoder):
    """The same, with ``init_parameters()`` called by ``__init__``: a random value nothing
    re-draws after ``to_empty()`` (no hook): lost."""

    def __init__(self, width=8, output_dim=4):
        super().__init__(width, output_dim)
        self.init_parameters()


class HalfWritten(nn.Module):
    """``torch.empty`` of which ``__init__`` writes a slice: it has values, compared as ever."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.empty(8))
        with torch.no_grad():
            self.w[:4].fill_(1.5)


def test_a_tensor_nothing_initialises_eagerly_has_no_value_to_lose():
    # fails before: text_projection and logit_bias lost (eager garbage vs the poison)
    res = probe(CrossDecoder, device="cpu")
    assert res.findings == [], res.findings


def test_uninitialised_only_until_written():
    res = probe(CrossDecoderInitialised, device="cpu")
    assert [(f.code, f.message.split("`")[1]) for f in res.findings] == [
        ("MP002", "text_projection")
    ]
    # the other half is garbage: deterministic or not depends on what the allocator reuses
    res = probe(HalfWritten, device="cpu")
    assert [f.message.split("`")[1] for f in res.findings] == ["w"]
    assert res.findings[0].code in ("MP001", "MP002")


def test_random_one_element_tensor_is_not_deterministic():
    res = probe(RandomScalar, device="cpu")
    assert res.findings == [], res.findings


def test_randomness_outside_torch_is_seen_from_two_seeds():
    random.seed(0)
    res = probe(PythonRandom, device="cpu")
    assert res.findings == [], res.findings


def test_constant_scalar_still_lost():
    res = probe(ConstantScalarLost, device="cpu")
    assert [(f.code, f.message.split("`")[1]) for f in res.findings] == [("MP001", "scale")]


def test_argument_guesses_for_typed_and_forwarded_parameters():
    from metalint.probe.target import CannotConstruct, infer_arguments

    class Typed(nn.Module):
        def __init__(
            self,
            img_size: Union[int, Tuple[int, int]],
            window: Tuple[int, int],
            mode: Literal["bilinear", "nearest"],
            act: Optional[nn.Module],
            pool: tuple[int, ...],
        ):
            super().__init__()

    assert infer_arguments(Typed) == {
        "img_size": 16,
        "window": (4, 4),
        "mode": "bilinear",
        "act": None,
        "pool": (4, 4),
    }

    class Forwarded(nn.Module):  # c1/c2 mean nothing by name; Conv2d says what they are
        def __init__(self, c1, c2, k, padding_mode):
            super().__init__()
            self.conv = nn.Conv2d(c1, c2, kernel_size=k, padding_mode=padding_mode)

    kwargs = infer_arguments(Forwarded)
    assert kwargs == {"c1": 16, "c2": 16, "k": 3, "padding_mode": "zeros"}
    Forwarded(**kwargs)  # the guesses build

    class Opaque(nn.Module):
        def __init__(self, thing):
            super().__init__()
            self.thing = thing

    try:
        infer_arguments(Opaque)
    except CannotConstruct as exc:
        assert "`thing`" in str(exc)
    else:
        raise AssertionError("an argument used nowhere got a guess")

    class Spectral(nn.Module):  # pypots' idiom: names that say nothing, used as numbers
        def __init__(self, seq_len, modes1, mode_type):
            super().__init__()
            self.modes = min(modes1, seq_len // 2)
            self.weights = nn.Parameter(torch.rand(self.modes, 2))
            if mode_type == 1:
                self.weights = nn.Parameter(torch.rand(self.modes, 3))

    kwargs = infer_arguments(Spectral)
    assert kwargs == {"seq_len": 16, "modes1": 4, "mode_type": 4}
    Spectral(**kwargs)


def test_argument_guesses_for_activations_and_tensors():
    """torch-geometric's idioms: DimeNet's blocks take ``act: Callable`` (the module
    ``activation_resolver`` makes), link-prediction metrics a ``Tensor`` of per-item values;
    a callable of another role still gets no guess."""
    import collections.abc
    from typing import Callable

    import torch

    from metalint.probe.target import CannotConstruct, infer_arguments

    class ResidualLayer(nn.Module):
        def __init__(self, hidden_channels: int, act: Callable):
            super().__init__()
            self.act = act
            self.lin1 = nn.Linear(hidden_channels, hidden_channels)

    kwargs = infer_arguments(ResidualLayer)
    assert kwargs["hidden_channels"] == 16 and isinstance(kwargs["act"], nn.SiLU)
    ResidualLayer(**kwargs)

    class Diversity(nn.Module):
        def __init__(self, k: int, category: torch.Tensor):
            super().__init__()
            self.register_buffer("category", category, persistent=False)
            self.register_buffer("accum", torch.tensor(0.0), persistent=False)

    kwargs = infer_arguments(Diversity)
    assert kwargs["k"] == 4 and isinstance(kwargs["category"], torch.Tensor)
    assert set(dict(Diversity(**kwargs).named_buffers())) == {"category", "accum"}

    class Memory(nn.Module):
        def __init__(self, message_module: collections.abc.Callable):
            super().__init__()
            self.msg = message_module

    try:
        infer_arguments(Memory)
    except CannotConstruct as exc:
        assert "`message_module" in str(exc)
    else:
        raise AssertionError("a callable that is no activation got a guess")


def test_a_reset_hook_that_needs_arguments_is_not_run():
    """peft's RoadLayer: ``reset_parameters(adapter_name, init_weights)`` is no hook the
    per-module protocol can call; the probe runs the other modules' hooks and judges the
    model (it raised TypeError for the whole root before)."""

    class Adapter(nn.Module):
        def __init__(self):
            super().__init__()
            self.base_layer = nn.Linear(4, 4)
            self.theta = nn.ParameterDict({"default": nn.Parameter(torch.zeros(4))})

        def reset_parameters(self, adapter_name, init_weights):
            nn.init.zeros_(self.theta[adapter_name])

    res = probe(Adapter, device="cpu", init="reset_parameters")
    assert [(f.code, f.message.split("`")[1]) for f in res.findings] == [("MP001", "default")]


def test_nothing_built_is_not_a_green(tmp_path):
    from click.testing import CliRunner

    from metalint.probe.command import probe_command

    model = tmp_path / "opaque.py"
    model.write_text(
        "from torch import nn\n\n\n"
        "class Opaque(nn.Module):\n"
        "    def __init__(self, thing):\n"
        "        super().__init__()\n"
        "        self.thing = thing\n"
    )
    for fmt in ("text", "json"):
        res = CliRunner().invoke(
            probe_command, [str(model), "--device", "cpu", "--output-format", fmt]
        )
        assert res.exit_code == 2, res.output
        assert "All checks passed!" not in res.output
        assert "probed 0 of 1 items; 1 skipped (cannot construct)" in res.stderr
        assert "Nothing was probed" in res.stderr
    # one built, one skipped: the verdict stands, and the skip is said
    model.write_text(model.read_text() + "\n\nclass Fine(nn.Module):\n    pass\n")
    res = CliRunner().invoke(probe_command, [str(model), "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert "probed 1 of 2 items; 1 skipped (cannot construct)" in res.stderr


def test_progress_counts_classes_on_stderr(tmp_path, capsys):
    from metalint.probe.command import run_probe
    from metalint.probe.isolate import Options

    model = tmp_path / "two.py"
    model.write_text(
        "from torch import nn\n\n\nclass A(nn.Module):\n    pass\n\n\nclass B(A):\n    pass\n"
    )
    rep = run_probe([str(model)], Options(device="cpu"), progress=True)
    err = capsys.readouterr().err
    assert [o.kind for o in rep.outcomes] == ["result", "result"]
    assert "probe: 0 classes done; file 1/1, class 1/2: two.py:A" in err
    assert "probe: 1 classes done; file 1/1, class 2/2: two.py:B" in err


def _fixture_module(name: str):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "fixtures" / "check" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_fixture_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_weight_norm_g_and_v_are_lost_where_check_says_and_a_hook_assigning_weight_keeps_them():
    """What ML014 reports in fixtures/check/audio_codec_weight_norm.py is what the probe finds:
    the convolutions' g and v never re-initialised (and Snake's alpha, ML001); the class whose
    hook assigns a fresh ``weight`` (the parametrization's right_inverse) passes."""
    mod = _fixture_module("audio_codec_weight_norm")
    res = probe(mod.EncoderBlock, device="cpu")
    lost = {name.rsplit(".", 1)[-1] for d in res.findings for name in d.subject}
    assert {"original0", "original1", "alpha"} <= lost, res.findings
    assert probe(mod.ResetUnit, device="cpu").findings == []


class _BothHooks(nn.Module):
    """A fix gave it both hooks: its buffer in ``reset_parameters()``, its child's init in
    ``init_weights()`` (pypots' SCINet after ML002's and ML010's fixes)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("scale", torch.empty(4))
        self.reset_parameters()
        self.init_weights()

    def reset_parameters(self):
        with torch.no_grad():
            self.scale.copy_(torch.arange(4.0).exp())

    def init_weights(self):
        nn.init.zeros_(self.fc.bias)


class _HoldsBoth(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _BothHooks()
        self.head = nn.Linear(4, 2)


def test_auto_runs_a_modules_reset_parameters_and_its_init_weights():
    # fails before: under ``auto`` a module with an init_weights() ran it instead of its
    # reset_parameters(), and ``scale`` stayed the poison
    res = probe(_HoldsBoth, device="cpu")
    assert res.findings == [], res.findings
    assert "reset_parameters() and init_weights() per module" in res.init_used


class _LazyHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.LazyLinear(8)
        self.head = nn.Linear(8, 3)


def test_a_model_with_lazy_modules_is_skipped_with_the_reason():
    # failed before with "Attempted to use an uninitialized parameter" (torchrl's lazy MLPs),
    # counted as a failure of whatever fix had rewritten the class
    import pytest

    from metalint.probe.build import LazyModules

    with pytest.raises(LazyModules, match="`body`: LazyLinear"):
        probe(_LazyHead, device="cpu")
