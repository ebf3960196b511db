"""A run from the user's side: the session's phases, one measure(), the schedule, workers, compile pool, forecast."""
