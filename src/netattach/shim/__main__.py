"""`python -m netattach.shim`, the zipapp's `__main__` and the frozen executable's entry script."""

import sys

from netattach.shim.main import main

sys.exit(main())
