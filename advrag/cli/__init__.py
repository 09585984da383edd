"""`advrag` command line: every stage runs without Prefect too.

One module per stage group, each registering its commands on the one ``app`` (``base``), in the
order `advrag --help` lists them: ``data`` (the data-plane commands `dvc.yaml` calls, the
retrieval server, `prepare-data`), ``evaluate`` (`benchmark`), ``train`` (`rl`, the recipe
aliases derived from the recipe table, curation, the discriminator), ``pipeline`` (`pipeline`,
`demo` — what `make demo` runs —, `nightly`, `promote`, `rollback`), ``ops`` (`schedule`,
`unschedule`, `ui`) and ``configs`` (`config show`).
"""

# ruff: noqa: I001, F401 (each group registers its commands when imported, in --help's order)
from advrag.cli import data
from advrag.cli import evaluate
from advrag.cli import train
from advrag.cli import pipeline
from advrag.cli import ops
from advrag.cli import configs
from advrag.cli.base import _environment, app, config_kinds, config_model, main

__all__ = ["_environment", "app", "config_kinds", "config_model", "main"]
