"""Non-agentic baselines (CoT, naive RAG) and the answer reader every method uses.

Both baselines make one batched generation over all questions (stop after
``</answer>``); naive RAG first makes one batched retrieval with the questions
as queries. Each returns ``(predictions, trajectories)``; a trajectory whose
answer could not be read gets ``format_errors = 1``. The whole rendered user
message (documents included) is one "prompt" segment: the chat template is
applied to it as a unit, and none of it was sampled.
"""

from __future__ import annotations

from collections.abc import Sequence

from advrag.agents.prompts import cot_prompt, direct_reasoning_prompt, naive_rag_prompt
from advrag.agents.protocol import last_content
from advrag.agents.types import Trajectory, budget_cuts
from advrag.common.types import Retriever, TextGenerator


def extract_answer(text: str) -> str | None:
    """The final answer in model output: content of the last closed ``<answer>``.

    Fallback: the content of the last unclosed ``<answer>`` (the model opened it
    and then stopped); None when there is no non-empty answer at all.
    """
    return last_content(text, "answer")


def _answer_all(
    prompts: list[str], generator: TextGenerator, max_new_tokens: int
) -> tuple[list[str | None], list[Trajectory]]:
    """One batched generation from rendered prompts; read each answer."""
    outputs = generator.generate(prompts, max_new_tokens=max_new_tokens, stop=("</answer>",))
    trajs = []
    cuts = budget_cuts(generator, len(outputs))
    for prompt, out, cut in zip(prompts, outputs, cuts, strict=True):
        traj = Trajectory(n_turns=1, cut_turns=int(cut))
        traj.add(prompt, "prompt")
        traj.add(out, "policy")
        traj.answer = extract_answer(out)
        traj.format_errors = int(traj.answer is None)
        trajs.append(traj)
    return [t.answer for t in trajs], trajs


def answer_cot(
    questions: Sequence[str], generator: TextGenerator, max_new_tokens: int = 256
) -> tuple[list[str | None], list[Trajectory]]:
    """Chain-of-thought baseline without retrieval: think, then ``<answer>``."""
    if not questions:
        return [], []
    prompts = [generator.chat_prompt(cot_prompt(q)) for q in questions]
    return _answer_all(prompts, generator, max_new_tokens)


def answer_naive_rag(
    questions: Sequence[str],
    generator: TextGenerator,
    retriever: Retriever,
    k: int = 3,
    max_new_tokens: int = 256,
) -> tuple[list[str | None], list[Trajectory]]:
    """Naive RAG baseline: retrieve top-k for the question once, then answer in ``<answer>``."""
    if not questions:
        return [], []
    results = retriever.search(list(questions), k=k)
    prompts = [
        generator.chat_prompt(naive_rag_prompt(q, passages))
        for q, passages in zip(questions, results, strict=True)
    ]
    predictions, trajs = _answer_all(prompts, generator, max_new_tokens)
    for traj, passages in zip(trajs, results):
        traj.n_searches = 1
        traj.retrieved_ids = [p.id for p in passages]
    return predictions, trajs


def answer_direct(
    questions: Sequence[str], generator: TextGenerator, max_new_tokens: int = 256
) -> tuple[list[str | None], list[Trajectory]]:
    """UR²'s direct step-by-step reasoning (task mixing): the facts are in the question."""
    if not questions:
        return [], []
    prompts = [generator.chat_prompt(direct_reasoning_prompt(q)) for q in questions]
    return _answer_all(prompts, generator, max_new_tokens)
