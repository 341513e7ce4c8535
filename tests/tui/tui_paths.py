"""Paths used by the TUI tests."""

from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SAMPLE_DIR = ROOT / "assets" / "recordings"
SAMPLE_SLAB = SAMPLE_DIR / "sample-churn-slab.slabrec"
SAMPLE_DENSE = SAMPLE_DIR / "sample-churn-dense.slabrec"
