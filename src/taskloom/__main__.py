"""`python -m taskloom` runs the `taskloom` command."""

import sys

from .cli import main

sys.exit(main())
