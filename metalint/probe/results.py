"""Torch-free helpers over a probe result (``ProbeResult.to_json()`` dicts)."""

from __future__ import annotations

from typing import Any

LOST_CODES = ("MP001", "MP002")


def verdict_text(result: dict[str, Any]) -> str:
    if result.get("status") == "error":
        return f"error: {result.get('error')}"
    findings = result.get("findings", [])
    tensors = result.get("tensors", 0)
    if not findings:
        return f"passed ({tensors} tensors)"
    parts = []
    lost = result.get("lost", 0)
    if lost:
        parts.append(f"{lost} of {tensors} tensors lost")
    other = [f for f in findings if f["code"] not in LOST_CODES]
    if other or not parts:
        codes = sorted({f["code"] for f in findings})
        parts.append(
            f"{len(findings)} finding{'s' if len(findings) != 1 else ''} ({', '.join(codes)})"
        )
    return "failed: " + ", ".join(parts)
