import sys

from abtui.cli import main

sys.exit(main())
