"""The test suite. Imported before any conftest, so the lines below run before the first
module of the project is imported."""

import os
import sys

# Some machines set PYTHONDONTWRITEBYTECODE. Then every test process would compile and
# assert-rewrite every module again (collection alone went from 7 to 15 s), and so would every
# process a test starts (0.3 s more CPU for each `signoff` command). __pycache__ is ignored by
# git; the suite writes it. Undone here, not in tests/conftest.py: that one imports the
# project's modules first, which were then never written.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
