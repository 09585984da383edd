"""Helpers with no project imports: atomic file and directory writes, device and allocator choice."""
