"""The engine: plan, scheduler, sample executor, store, resume, cost and sequential rounds."""
