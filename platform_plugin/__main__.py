import sys

from platform_plugin.cli import main

sys.exit(main())
