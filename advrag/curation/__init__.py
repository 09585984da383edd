"""Data curation: Great Expectations gates, warm-up demonstrations, UR²'s difficulty buckets and
task mixing, GAR's slicing and grounded slice labels."""
