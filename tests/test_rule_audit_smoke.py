"""bench/rule_audit.py --tiny: the model-level audit on fixtures/audit/tinylib.

Each finding is judged under the protocol of the roots that contain its class: the RMSNorm
weight a transformers-style root re-creates by class name is not reported (check judges it
under the same protocol, metalint.static.protocol; probed alone it would look lost), the
position embeddings that root never touches and dinov2's LayerScale gamma are confirmed, and
the class no root contains is probed on its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # a bench profile: probes every root of the tiny library
def test_rule_audit_tiny(tmp_path):
    out, js = tmp_path / "audit.md", tmp_path / "audit.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "rule_audit.py"),
            "--tiny",
            # TinyVisionModel is left out of the sample: the findings name it, and the audit
            # builds it as a root they name
            "--every",
            "tiny=2",
            "--workdir",
            str(tmp_path / "work"),
            "--out",
            str(out),
            "--json",
            str(js),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdicts = {
        (f["class"], f["message"].split("`")[1]): (f["verdict"], f["judged"])
        for f in json.loads(js.read_text())
        if f["code"] == "ML001"
    }
    assert ("TinyRMSNorm", "weight") not in verdicts
    assert verdicts[("TinyEmbeddings", "position_embeddings")] == ("confirmed", "root")
    assert verdicts[("TinyLayerScale", "gamma")] == ("confirmed", "root")
    assert verdicts[("TinyLonely", "scale")] == ("confirmed", "alone")
    text = out.read_text()
    assert "- tiny: 1/1 roots built, 1/1 groups + 1/1 roots the findings name" in text
    row = next(r for r in text.splitlines() if r.startswith("| tiny | ML001"))
    # findings, in roots, alone, confirmed, refuted, unproven
    assert [int(x) for x in row.split("|")[3:9]] == [3, 2, 1, 3, 0, 0]
    refuted = text.split("Refuted findings (rule, library, class: tensors):")[1]
    assert refuted.split("\n\n")[1].strip() == "- none"


def test_finding_on_a_base_is_judged_on_the_subclass_a_root_built():
    """peft's adaption prompt: ``_BaseAdaptedAttention.__init__`` creates ``adaption_prompt``;
    the root builds the subclass ``AdaptedAttention``, which loses it. The finding on the base
    is judged there (it was outside every root, and its class does not build alone)."""
    from metalint.diagnostics import Diagnostic, Position
    from metalint.probe.command import ProbeReport
    from metalint.probe.isolate import Outcome

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import rule_audit
    finally:
        sys.path.remove(str(ROOT / "bench"))
    info = {
        "file": "/p/layer.py",
        "cls": "AdaptedAttention",
        "module": "p.layer",
        "attrs": ["adaption_prompt"],
        "plain": [],
        "broken": {"adaption_prompt": ["MP002"]},
        "codes": [],
        "subtree_broken": 1,
        "raised": False,
        "compared": True,
    }
    rep = ProbeReport([Outcome("r:f", "result", result={"classes": {"/p/layer.py::A": info}})])

    def lineage(fullname):
        if fullname == "p.layer.AdaptedAttention":
            return [("/p/layer.py", "AdaptedAttention"), ("/p/layer.py", "_BaseAdaptedAttention")]
        return []

    d = Diagnostic(
        "ML001",
        "`adaption_prompt` is created from a value",
        "/p/layer.py",
        Position(1, 1),
        Position(1, 2),
        symbol="_BaseAdaptedAttention",
        subject=("adaption_prompt",),
    )
    before = list(rep.classes.values())
    assert rule_audit._verdict(d, before, rule_audit._roots_built(rep)) is None
    judged = rule_audit._with_bases(rep, lineage)
    after = list(judged.classes.values())
    assert rule_audit._verdict(d, after, rule_audit._roots_built(judged)) == "confirmed"
