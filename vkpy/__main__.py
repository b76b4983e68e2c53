"""`python -m vkpy`: see vkpy.cli."""

import sys

from vkpy.cli import main

sys.exit(main())
