"""Statistics and verdicts: intervals, pooling, comparisons and decisions; report/ formats them."""
