"""The discriminator SFT's slice set with `judge: llm`: config → task → judge → gate and counts.

The server is a standard-library OpenAI-compatible stand-in whose verdict is a
hash of the slice (yes, no, or a malformed reply, a third each), so the
plumbing is tested without a model: the real model is in
tests/engines/test_gar_llm_judge_vllm.py.
"""

from __future__ import annotations

import hashlib
import json

import pytest
from stand_in_http import QuietHandler, running_server

from advrag.curation.gar_llm_judge import make_slice_judge
from advrag.recipes.gar import DiscriminatorSFTConfig
from advrag.tasks import discriminator as steps


def _reply(slice_text: str) -> str:
    """yes, no or malformed, by the slice's hash."""
    pick = hashlib.sha256(slice_text.encode()).digest()[0] % 3
    if pick == 2:
        return "The answer is in the passages."
    verdict = "yes" if pick == 0 else "no"
    return f"Analysis: The slice was read.\nVerdict: {verdict}\nRationale: Hash {pick}."


class _Handler(QuietHandler):
    def do_GET(self):
        self.send_text(200, json.dumps({"data": [{"id": "hash-judge"}]}))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        slice_text = body["messages"][-1]["content"].rsplit("Slice: ", 1)[1].removesuffix("\n")
        self.send_text(200, json.dumps({"choices": [{"message": {"content": _reply(slice_text)}}]}))


@pytest.fixture()
def endpoint():
    with running_server(_Handler) as httpd:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"


def test_llm_labelled_slices_are_balanced_gated_and_counted(
        endpoint, tmp_path, small_world_dir, small_index_dir, tiny_policy_dir):
    config = DiscriminatorSFTConfig(
        model=str(tiny_policy_dir), questions=12, heldout_fraction=0.25, world_dir=small_world_dir,
        index_dir=small_index_dir, out_dir=tmp_path / "slices",
        judge={"kind": "llm", "endpoint": endpoint, "cache_dir": str(tmp_path / "judge")})
    policy, tokenizer = steps.load_discriminator.fn(config, config.model)
    rows, heldout, judged = steps.slice_set.fn(config, policy, tokenizer, config.model)

    assert judged["slices"] == judged["labelled"] + judged["malformed"] > 0
    assert judged["malformed"] == judged["malformed/no_verdict"] > 0
    assert rows and all(r["rationale"] in ("Hash 0.", "Hash 1.") for r in rows)
    assert all(_reply(r["slice"]).endswith(f"Verdict: {'yes' if r['sound'] else 'no'}\n"
                                           f"Rationale: {r['rationale']}") for r in rows)
    assert all(r["source"] != "corrupted" or not r["sound"] for r in rows)
    for split in ("train", "heldout"):
        labels = [r["sound"] for r in rows if r["split"] == split]
        assert labels and labels.count(True) == labels.count(False), split
    path = steps.write_and_gate.fn(config, rows, heldout)  # raises unless the GX gate passes
    assert len(path.read_text().splitlines()) == len(rows)
    again = make_slice_judge(config.judge, lexicon=None)
    assert again.name.endswith("#hash-judge") and again.cache.path.is_file()
