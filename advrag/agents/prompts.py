"""Every piece of text the agents are shown: instructions, wrappers, hints.

- Search-R1 single agent: our own wording of Search-R1's protocol (reason in
  ``<think>``, query in ``<search>``, results come back in ``<information>``,
  answer in ``<answer>``).
- ARR Reasoner, Verifier and Final Predictor: the text of ARR Appendix A.3.
  How this departs from the paper's printed text:
  * the PDF shows the verifier's tag as ``<selected_doc> ... <selected_doc>``;
    we print the closing tag ``</selected_doc>`` (the paper's own example in
    the same sentence closes it), so small models copy the right grammar;
  * the Final Predictor's sentence reads "directly answer the question between
    without detailed illustrations" in the extraction (the tags were lost);
    we restore "between <answer> and </answer>", which our parser reads;
  * the whole dialogue (every agent message and all retrieved documents) is
    inserted on a new line as a labelled transcript (see ``render_dialogue``
    in ``advrag.agents.arr``); the paper does not say how it is serialised.
- CoT (no retrieval) and naive RAG (top-k documents, then answer) baselines.
- UR²'s search prompt: Search-R1's protocol plus UR²'s query rules (Fig. 2, App. D.2: one
  fact per query, fewer than ``QUERY_WORD_LIMIT`` words, a query budget) in our own words,
  without the paper's example queries.
- The hint shown after a UR² summariser fallback (App. C.4), verbatim.
- REX-RAG's exploration pool (``exploration_prompts.txt``): 30 doubt and re-examination
  prompts in our own words (the release's pool is not copied).

Documents are printed by ``advrag.common.types.format_docs`` (UR²'s summariser
prints them the same way) and the summariser's fallback message is
``advrag.retrieval.summary.SUMMARY_FALLBACK_MESSAGE``.
"""

from __future__ import annotations

from collections.abc import Sequence

from advrag.agents.ur2_scoring import QUERY_WORD_LIMIT
from advrag.common.types import Passage, format_docs

SEARCH_R1_TEMPLATE = (
    "Answer the given question. Every time you get new information, first reason about it "
    "inside <think> and </think>. If, after reasoning, you find that you are missing some "
    "knowledge, you can query a search engine by writing <search> query </search>, and the "
    "top results will be returned between <information> and </information>. You may search "
    "as many times as you need. When no further external knowledge is needed, give the final "
    "answer inside <answer> and </answer>, without detailed explanations. For example, "
    "<answer> Beijing </answer>. Question: {question}\n"
)

ARR_REASONER_TEMPLATE = """To answer the given question, you will act as a reasoner working collaboratively with a retriever. Follow these steps carefully:

1. Reasoning Phase: When you receive a question, begin by reasoning about it inside <think> and </think>. This is where you analyze the problem and determine what you already know.
2. Identify Knowledge Gaps: If, during your reasoning, you realize that you lack some necessary information, you can request external knowledge by calling a search engine. To do this, write your query inside <search> and </search>.
3. Receive Search Results: After submitting your query, the verifier will process it and provide you with the top search results along with its opinion. This information will be enclosed between <feedback> and </feedback>.
4. Verification Phase: Every time you receive new information, you must first verify its relevance and usefulness. Conduct this verification inside <verify> and </verify>.
5. Update Reasoning: Based on the verified information, perform another round of reasoning inside <think> and </think>. Repeat steps 2–4 as many times as needed until you have enough information to answer the question.
6. Provide the Answer: Once you determine that no further external knowledge is required, provide your final answer directly inside <answer> and </answer>. Make sure to verify and think before answer the question. Keep your answer concise without additional explanations. For example: <answer> Beijing </answer>.

Always adhere strictly to the specified XML-like tags and respond only with the required elements.

Question: {question}"""

ARR_VERIFIER_TEMPLATE = """As a verifier, your task is to collaborate with the reasoner to answer the given question. Follow these steps carefully:

1. Verification Process:
 - The reasoner will provide its reasoning path, a retrieval query, and results from the search engine enclosed within <information> ... </information>.
 - Perform a verification check inside <verify> ... </verify> to assess whether the query effectively contributes to answering the question.
2. Handling Effective Queries:
If the query is deemed appropriate:
 - Choose the single most relevant document from the retrieved results and indicate it inside <selected_doc> ... </selected_doc> (e.g., <selected_doc> Doc 1 </selected_doc>).
 - Synthesize the selected information and your own reasoning into a clear, concise reply inside <response>...</response>.
3. Handling Ineffective Queries:
If the query is judged ineffective, DIRECTLY Provide a justification for this assessment inside <response>...</response>.
4. Answer Verification:
If the reasoner provides an answer enclosed within <answer> and </answer>
- Verify the answer inside <verify> ... </verify> based on your judgment.
- Provide the final verified response inside <final_answer>...</final_answer>, ensuring it is concise and free of unnecessary details. For example: <final_answer>Beijing</final_answer>. Always adhere strictly to the specified XML-like tags and respond only with the required elements.

Question: {question}"""

ARR_FINAL_PREDICTOR_TEMPLATE = """The rollout text of the reasoner and verifier is:
{dialogue}

Answer the following question. Prior to this, both the reasoner and the verifier have conducted reasoning and verification regarding this question. You are required to provide the answer based on their respective reasoning processes. You should directly answer the question between <answer> and </answer> without detailed illustrations.

Question: {question}"""

COT_TEMPLATE = (
    "Answer the given question. Think it through step by step inside <think> and </think>, "
    "then give the final answer inside <answer> and </answer>, without detailed "
    "explanations. For example, <answer> Beijing </answer>. Question: {question}\n"
)

NAIVE_RAG_TEMPLATE = (
    "Answer the question using the documents below. Give only the final answer inside "
    "<answer> and </answer>, without explanations. For example, <answer> Beijing </answer>."
    "\n\nDocuments:\n{docs}\n\nQuestion: {question}\n"
)

INVALID_ACTION_HINT = (
    "\nMy previous output was not a valid action. To search, I must put the query between "
    "<search> and </search>. To answer, I must put the answer between <answer> and </answer>.\n"
)
FORCE_ANSWER_HINT = (
    "\nNo more searches are allowed. I must now give the final answer between <answer> and "
    "</answer>.\n"
)
FALLBACK_HINT = (
    "It seems that this query exceeds the capabilities of the retrieval system. We may consider "
    "rephrasing it into a more fact-based and searchable question that does not require complex "
    "reasoning, or proceed with direct reasoning based on prior knowledge.\n\n"
)
"""UR² App. C.4: the visible hint appended after ``</information>`` when a search fell back."""
NO_FEEDBACK_TEXT = "The verifier gave no usable feedback."
INFO_OPEN, INFO_CLOSE = "\n\n<information>", "</information>\n\n"
FEEDBACK_OPEN, FEEDBACK_CLOSE = "\n\n<feedback>", "</feedback>\n\n"


def information_block(body: str) -> str:
    """Wrap text the environment returns to an agent in ``<information>`` tags."""
    return f"{INFO_OPEN}{body}{INFO_CLOSE}"


def search_r1_prompt(question: str) -> str:
    """User message for the Search-R1 single agent (think/search/information/answer)."""
    return SEARCH_R1_TEMPLATE.format(question=question)


UR2_SEARCH_TEMPLATE = (
    "Answer the given question. Every time you get new information, first reason about it "
    "inside <think> and </think>. When you lack a fact, look it up by writing <search> query "
    "</search>; the top results will be returned between <information> and </information>. "
    "Ask for one fact per query, never two at once. Keep every query under {word_limit} words. "
    "You have at most {budget} in all, so use them well. When no further external knowledge "
    "is needed, give the final answer inside <answer> and </answer>, without detailed "
    "explanations. For example, <answer> Beijing </answer>. Question: {question}\n"
)


def ur2_search_prompt(question: str, max_queries: int) -> str:
    """User message for UR²'s searching items: Search-R1's tags with UR²'s query rules
    (Fig. 2): one fact per query, under ``QUERY_WORD_LIMIT`` words (the limit
    ``agents.ur2_scoring`` rewards), at most ``max_queries`` searches (the loop's turns)."""
    if max_queries < 1:
        raise ValueError(f"max_queries must be >= 1, got {max_queries}")
    budget = "one search" if max_queries == 1 else f"{max_queries} searches"
    return UR2_SEARCH_TEMPLATE.format(word_limit=QUERY_WORD_LIMIT, budget=budget,
                                      question=question)


def arr_reasoner_prompt(question: str) -> str:
    """User message for the ARR Reasoner (Appendix A.3)."""
    return ARR_REASONER_TEMPLATE.format(question=question)


def arr_verifier_prompt(question: str) -> str:
    """User message for the ARR Verifier (Appendix A.3)."""
    return ARR_VERIFIER_TEMPLATE.format(question=question)


def arr_final_predictor_prompt(question: str, dialogue: str) -> str:
    """User message for the ARR Final Predictor, which reads the whole dialogue (Appendix A.3)."""
    return ARR_FINAL_PREDICTOR_TEMPLATE.format(dialogue=dialogue, question=question)


def cot_prompt(question: str) -> str:
    """User message for the chain-of-thought baseline (no retrieval)."""
    return COT_TEMPLATE.format(question=question)


def naive_rag_prompt(question: str, passages: Sequence[Passage]) -> str:
    """User message for the naive-RAG baseline: the top-k documents, then the question."""
    return NAIVE_RAG_TEMPLATE.format(docs=format_docs(passages), question=question)


DIRECT_REASONING_TEMPLATE = (
    "Answer the given question by reasoning step by step, without any search: everything "
    "you need is stated in the question. Reason inside <think> and </think>, then give the "
    "final answer inside <answer> and </answer>, without detailed explanations. For example, "
    "<answer> 67 </answer>. Question: {question}\n"
)


def direct_reasoning_prompt(question: str) -> str:
    """User message for UR²'s direct step-by-step reasoning items (task mixing, §3.1.2):
    the think/answer half of the Search-R1 tag grammar, no search."""
    return DIRECT_REASONING_TEMPLATE.format(question=question)


EXPLORATION_PROMPTS = "exploration_prompts.txt"
"""REX-RAG's pool of exploration prompts (our own words), one a line, beside this module."""


def exploration_pool(size: int) -> list[str]:
    """The first ``size`` prompts of REX-RAG's exploration pool (the paper's ablation compares
    pools of 5, 15 and 30): what a probe inserts after a failed trajectory's removed answer."""
    from importlib.resources import files

    text = files("advrag.agents").joinpath(EXPLORATION_PROMPTS).read_text(encoding="utf-8")
    prompts = [line.strip() for line in text.splitlines()
               if line.strip() and not line.startswith("#")]
    if not 1 <= size <= len(prompts):
        raise ValueError(f"exploration pool size {size}: choose 1 to {len(prompts)} "
                         "(the paper's ablation: 5, 15, 30)")
    return prompts[:size]


def probe_observation(prompt: str) -> str:
    """How a probe's exploration prompt is inserted after the removed answer: on a line of its
    own, so the policy continues from a fresh line (the policy correction's pool
    distribution is over these exact strings' tokens)."""
    return f"\n{prompt}\n"
