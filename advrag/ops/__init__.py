"""Operations: DVC calls and the data version, the local Prefect schedule, the UI servers."""
