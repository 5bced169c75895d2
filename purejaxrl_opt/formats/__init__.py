"""On-disk formats any layer may read: checkpoint trees (orbax, with a manifest of every leaf's path,
shape, dtype and SHA-256, and the manager of a run's training checkpoints). Imports only config."""
