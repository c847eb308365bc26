"""`python -m bot.cli`: the same as the `signoff` script."""

import sys

from bot.cli import main

sys.exit(main())
