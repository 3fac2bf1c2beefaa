"""`python -m torchtpu.testing.opinfo`: see torchtpu.testing.opinfo.cli."""

import sys

from .cli import main

sys.exit(main())
