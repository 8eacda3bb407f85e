import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

from tiny import FAMILIES, tiny_model  # noqa: E402


@pytest.fixture(params=FAMILIES)
def family(request):
    return request.param


@pytest.fixture
def model(family):
    return tiny_model(family)
