"""Data curation: Great Expectations quality gates and the warm-up demonstrations (UR² bucketing
and GAR slice labelling are planned)."""
