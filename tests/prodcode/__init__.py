"""Production code the tests import as `[filter]`/`[retrieval]` functions would be imported."""
