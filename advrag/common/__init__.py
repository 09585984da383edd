"""The floor every layer may stand on; imports nothing from the project.

The types the layers share (passages; the retriever, summariser and text-generator
protocols: ``types``), the OpenAI-compatible client (``endpoint``), atomic file and
directory writes, device and allocator choice.
"""
