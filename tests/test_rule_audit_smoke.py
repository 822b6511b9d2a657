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

ROOT = Path(__file__).resolve().parent.parent


def test_rule_audit_tiny(tmp_path):
    out, js = tmp_path / "audit.md", tmp_path / "audit.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "rule_audit.py"),
            "--tiny",
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
    assert "- tiny: 2/2 roots built" in text
    row = next(r for r in text.splitlines() if r.startswith("| tiny | ML001"))
    # findings, in roots, alone, confirmed, refuted, unproven
    assert [int(x) for x in row.split("|")[3:9]] == [3, 2, 1, 3, 0, 0]
    refuted = text.split("Refuted findings (rule, library, class: tensors):")[1]
    assert refuted.split("\n\n")[1].strip() == "- none"
