"""The discriminator's judgments under a policy: P(yes) at the verdict, held-out loss, scores.

GAR §3 reads a binary verdict per slice and its GAN term needs M_d(x), the
probability that a slice is sound; the paper does not say how that
probability is read from a generative judge. Ours: the probability of " yes"
against " no" right after "Verdict:" in the judge's own output,

    P(yes) = p(yes | context) / (p(yes | context) + p(no | context)),

context = the rendered prompt + the output up to and including its first
"Verdict:" (case-sensitive, the SFT target's spelling; None without one).

Tokenisation: the prompt and the output are tokenised apart
(``add_special_tokens=False``), as ``encode_trajectories`` does in SFT. " yes"
and " no" are tokenised alone; their shared leading tokens are appended to
the context and the first tokens where they differ are compared. SmolLM2's
BPE has single tokens " yes" (9805) and " no" (787) and ":" never merges with
them, so this is the plain next-token comparison; the tests' tiny BPE writes
them " ", "y", "es" and " ", "n", "o", so it compares "y" with "n" after " ".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from advrag.agents.types import Trajectory
from advrag.engines.local.logprobs import scored_logits
from advrag.engines.local.policy import TrainablePolicy
from advrag.engines.local.tokenize import Batch, encode_trajectories

VERDICT = "Verdict:"
YES, NO = " yes", " no"


def verdict_tokens(tokenizer) -> tuple[list[int], int, int]:
    """``(shared prefix ids, yes id, no id)``: " yes" and " no" up to where they first differ."""
    yes = tokenizer(YES, add_special_tokens=False)["input_ids"]
    no = tokenizer(NO, add_special_tokens=False)["input_ids"]
    shared = 0
    while shared < min(len(yes), len(no)) and yes[shared] == no[shared]:
        shared += 1
    if shared == min(len(yes), len(no)):
        raise ValueError(f"the tokenizer cannot tell {YES!r} ({yes}) from {NO!r} ({no})")
    return yes[:shared], yes[shared], no[shared]


def verdict_context(tokenizer, prompt: str, output: str, shared: list[int]) -> list[int] | None:
    """Ids of prompt + output through "Verdict:" + ``shared``; None when there is no verdict."""
    at = output.find(VERDICT)
    if at < 0:
        return None
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids += tokenizer(output[:at + len(VERDICT)], add_special_tokens=False)["input_ids"]
    return ids + shared


def _last_logits(policy: TrainablePolicy, contexts: list[list[int]], pad_id: int) -> torch.Tensor:
    """Logits ``(n, vocab)`` of the next token after each context (right-padded, one pass)."""
    lengths = torch.tensor([len(c) for c in contexts])
    ids = torch.full((len(contexts), int(lengths.max())), pad_id, dtype=torch.long)
    for row, context in enumerate(contexts):
        ids[row, :len(context)] = torch.tensor(context)
    mask = torch.arange(ids.shape[1])[None, :] < lengths[:, None]
    batch = Batch(ids, mask, mask, torch.zeros_like(ids), torch.zeros(len(contexts), dtype=torch.bool))
    batch = batch.to(policy.device)
    rows = torch.arange(len(contexts), device=policy.device)
    with policy.autocast():
        return scored_logits(policy.model, batch, rows, lengths.to(policy.device)).float()


@torch.no_grad()
def verdict_probabilities(policy: TrainablePolicy, tokenizer, prompts: Sequence[str],
                          outputs: Sequence[str], *, batch_size: int = 16) -> list[float | None]:
    """P(yes) at each output's verdict (see the module docstring); None where it has none.

    ``prompts`` are the rendered prompts the ``outputs`` continue. Runs under the
    policy's own adapter (``activate`` where it has one), in micro-batches.
    """
    if len(prompts) != len(outputs):
        raise ValueError(f"{len(prompts)} prompts but {len(outputs)} outputs")
    if hasattr(policy, "activate"):
        policy.activate()
    shared, yes, no = verdict_tokens(tokenizer)
    contexts = [verdict_context(tokenizer, p, o, shared) for p, o in zip(prompts, outputs)]
    found = [i for i, c in enumerate(contexts) if c is not None]
    probs: list[float | None] = [None] * len(contexts)
    for start in range(0, len(found), batch_size):
        rows = found[start:start + batch_size]
        logits = _last_logits(policy, [contexts[i] for i in rows], tokenizer.pad_token_id)
        p_yes = torch.sigmoid(logits[:, yes] - logits[:, no])  # softmax over the two tokens
        for i, p in zip(rows, p_yes.tolist()):
            probs[i] = p
    return probs


def judgment_loss(policy: TrainablePolicy, tokenizer, trajectories: Sequence[Trajectory], *,
                  max_len: int, micro_batch_size: int) -> float:
    """Mean NLL per judgment token (the policy's segments) over ``trajectories``, no gradient."""
    batch = encode_trajectories(trajectories, tokenizer, max_len=max_len).to(policy.device)
    logprobs, _ = policy.logprobs(batch, micro_batch_size=micro_batch_size)
    return float(-(logprobs * batch.loss_mask).sum() / batch.loss_mask.sum().clamp(min=1))


def judgment_metrics(sound: Sequence[bool], verdicts: Sequence[bool | None],
                     p_yes: Sequence[float | None]) -> dict[str, float]:
    """Accuracy, macro F1 over yes/no, AUROC of P(yes), the malformed count, and the
    accuracy of P(yes) ≥ 0.5.

    A malformed output (no verdict) is wrong for accuracy and F1. F1 is NaN unless both labels
    are in ``sound``: the macro mean over a label no slice has would halve it. ``auroc`` ranks the
    outputs that have a P(yes) and is NaN unless both labels are among them; ``auroc_all``
    ranks every output, one without a P(yes) at 0.5 (no information either way, as GAR's
    rewards read it), so a judge cannot look better by writing fewer verdicts.
    ``p_yes_accuracy`` reads the judgment GAR's rewards use, P(yes) at "Verdict:",
    instead of the written word: an output with "Verdict:" but no parsable yes/no
    still has one; an output without "Verdict:" is wrong.
    """
    from sklearn.metrics import f1_score, roc_auc_score

    truth = ["yes" if s else "no" for s in sound]
    said = ["malformed" if v is None else "yes" if v else "no" for v in verdicts]
    scored = [(s, p) for s, p in zip(sound, p_yes) if p is not None]
    both = len({s for s, _ in scored}) == 2
    return {
        "accuracy": sum(t == s for t, s in zip(truth, said)) / max(len(truth), 1),
        "f1": float(f1_score(truth, said, labels=["yes", "no"], average="macro", zero_division=0))
        if len(set(sound)) == 2 else math.nan,
        "auroc": float(roc_auc_score([s for s, _ in scored], [p for _, p in scored]))
        if both else math.nan,
        "auroc_all": float(roc_auc_score(list(sound), [0.5 if p is None else p for p in p_yes]))
        if len(set(sound)) == 2 else math.nan,
        "malformed": float(said.count("malformed")),
        "p_yes_accuracy": sum(p is not None and (p >= 0.5) == s for s, p in zip(sound, p_yes))
        / max(len(sound), 1),
    }
