"""`python -m vkpy`: see vkpy.app.cli."""

import sys

from vkpy.app.cli import main

sys.exit(main())
