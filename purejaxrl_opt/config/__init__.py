"""What a run is given and how it is checked: the typed config and its validation (``schema``), the
language-model sections (``lm``), :class:`~purejaxrl_opt.config.errors.ConfigError` and the
per-backend implementation choices. Imports nothing else of the package."""
