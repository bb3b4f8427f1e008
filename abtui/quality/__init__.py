"""Quality suites: built-in (generated from a seed) and user (JSONL), their scoring, the paired
statistics between arms (docs/methods.md §4) and the verdict's quality gates."""
