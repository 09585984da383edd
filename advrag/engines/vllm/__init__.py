"""vLLM engine: rollouts from a running vLLM engine whose weights follow the trained policy.

Importing this package does not import vLLM; ``generation.VLLMGenerator`` does
when it starts an engine (install with ``make vllm``).
"""
