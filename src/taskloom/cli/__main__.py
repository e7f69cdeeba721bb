"""`python -m taskloom.cli` runs the `taskloom` command."""

import sys

from . import main

sys.exit(main())
