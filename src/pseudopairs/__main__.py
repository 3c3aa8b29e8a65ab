"""``python -m pseudopairs STEP ...``: the same command line as the ``pseudopairs`` script (the
workflow's rules use this form, so a per-rule conda environment needs no installed package)."""

import sys

from pseudopairs.cli import main

sys.exit(main())
