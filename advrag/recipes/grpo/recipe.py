"""Recipe ``grpo``: one Search-R1-style agent trained with GRPO (or REINFORCE++, Dr.GRPO) on the
world's training questions, the Search-R1 reward (F1 or EM of the final answer minus a format
penalty). The agent, its update and REX-RAG's exploration are ``recipes.search_agent``'s."""

from __future__ import annotations

from advrag.recipes.grpo.config import GrpoConfig
from advrag.recipes.search_agent.recipe import SearchAgentRecipe


class GrpoRecipe(SearchAgentRecipe):
    """Single-agent GRPO on the search loop."""

    name = "grpo"
    config: GrpoConfig
    config_model = GrpoConfig
    default_config = "configs/train.yaml"
    aliases = ("train",)

    def verl_runs(self) -> list:
        """One verl run on the world's training questions with the Search-R1 reward; with
        ``exploration``, REX-RAG's loop and trainer (``recipes.rex_rag.verl``)."""
        from advrag.engines.verl.runs import VerlRun
        from advrag.recipes.grpo.verl import search_r1_reward
        from advrag.recipes.rex_rag.verl import verl_exploration

        c, reward = self.config, search_r1_reward(self.config)
        return [VerlRun(experiment=self.name, steps=c.steps, reward=reward,
                        **verl_exploration(c.exploration, reward, c.optim.seed))]
