"""Command-line entry points: thin wrappers, the only place where configs become objects."""
