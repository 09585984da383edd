"""GAR's slice labeller (``JudgeSection``): who labels a slice sound or unsound, read by the
curation that labels them (``curation.gar_llm_judge``), so it sits below the recipes; the
discriminator SFT's own config is the ``gar`` recipe's (``recipes.gar.config``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from advrag.config.base import Strict


class JudgeSection(Strict):
    """Who labels the slices sound or unsound (GAR §4.1: an API model, GPT-o4-mini)."""

    kind: Literal["grounded", "llm"] = Field("grounded", description="'grounded': the offline "
                                             "world's rule-based judge (gold facts, retrieved "
                                             "passages); 'llm': a model behind endpoint.")
    endpoint: str | None = Field(None, pattern=r"^https?://", description="With kind 'llm': the "
                                 "OpenAI-compatible server (http://host:port, e.g. vLLM).")
    model: str | None = Field(None, min_length=1, description="The served model's name; null = "
                              "the first the server lists.")
    timeout_s: float = Field(60.0, gt=0, description="Per-request limit; a request that runs "
                             "past it is counted (malformed/timeout) and its slice dropped.")
    max_tokens: int = Field(128, ge=1, description="Most tokens of one judgment (GAR's K).")
    concurrency: int = Field(4, ge=1, description="Requests in flight at once.")
    max_context_chars: int = Field(4000, ge=0, description="The retrieved passages shown with a "
                                   "slice are cut at this many characters (the model's context).")
    cache_dir: Path = Field(Path(".cache/advrag/gar_judge"), description="Replies are cached "
                            "here by (endpoint, model, prompt).")

    @model_validator(mode="after")
    def _llm_needs_an_endpoint(self) -> JudgeSection:
        if self.kind == "llm" and self.endpoint is None:
            raise ValueError("judge.kind 'llm' needs judge.endpoint: the URL of an "
                             "OpenAI-compatible server, e.g. http://127.0.0.1:8000 for "
                             "`vllm serve <model>`")
        return self
