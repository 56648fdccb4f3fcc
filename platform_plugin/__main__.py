"""`python -m platform_plugin` is `platform-run`."""
from __future__ import annotations

import sys

from platform_plugin.cli import main

sys.exit(main())
