"""The IPython magics: `%dist_run`, `%dist_compare`, `%platform_clean`."""
