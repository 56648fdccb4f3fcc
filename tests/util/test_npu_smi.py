"""`npu-smi info` parsing, on the STAND-IN that prints a real 8 x 910B3 table (no NPU here)."""
from __future__ import annotations

from platform_plugin.util import npu_smi
from tests.helpers import ASSETS

STANDIN = str(ASSETS / "system" / "npu-smi")


def test_every_card_of_the_table_with_aicore_and_hbm_and_na_skipped():
    cards = npu_smi.sample(STANDIN)
    assert sorted(cards) == list(range(8))  # the process table's rows are not cards
    assert (cards[4].aicore_percent, cards[4].hbm_used_mb, cards[4].hbm_total_mb) == (54, 41544, 65536)
    assert cards[0].name == "910B3" and cards[0].health == "OK"
    assert cards[6].aicore_percent is None and cards[6].hbm_used_mb == 3316  # AICore NA


def test_missing_or_failing_npu_smi_gives_nothing(tmp_path):
    assert npu_smi.sample(str(tmp_path / "absent")) == {}
    broken = tmp_path / "npu-smi"
    broken.write_text("#!/bin/sh\necho 'dcmi module initialize failed' >&2\nexit 255\n")
    broken.chmod(0o755)
    assert npu_smi.sample(str(broken)) == {}
