"""benchmarks/peers.py's --quick form, on a tiny Llama with SmolLM2's tokenizer: every peer
(TransformerLens 4.3, nnsight 0.8) gives headwatch's numbers on every task within the task's stated
tolerance — the check that lets a time count; the direct effects and composition scores within the
bound of float32 rounding their own guards state. Times are not checked (a benchmark's business)."""
import json
import subprocess
import sys

from conftest import ROOT


def test_every_peer_gives_headwatchs_numbers_on_every_task(tiny_model_dir, tmp_path):
    out = tmp_path / "peers.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "peers.py"), "--quick", "--check", "--threads", "1",
                          "--model", str(tiny_model_dir), "--json", str(out)], capture_output=True, text=True,
                         cwd=ROOT, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    got = json.loads(out.read_text())
    tasks = {t["task"]: t for t in got["tasks"]}
    assert list(tasks) == ["maps", "cuts", "patch_heads", "positions", "attribution", "paths", "edges", "direct",
                           "composition"]
    for name, t in tasks.items():
        peers = set(t["max_diff"])
        alone = ("paths", "edges", "direct", "composition")        # tasks nnsight has no function for
        assert peers == ({"transformer_lens"} if name in alone else {"transformer_lens", "nnsight"}), name
        assert all(d <= t["tolerance"] for d in t["max_diff"].values()), t
    assert got["transformer_lens"] == "4.3.0" and got["nnsight"] == "0.8.1"
