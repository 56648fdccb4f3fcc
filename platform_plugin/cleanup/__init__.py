"""Clear operator caches, logs and models from CODE/ (rules in `rules/*.toml`)."""
