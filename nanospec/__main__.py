"""`python -m nanospec …`: the `nanospec` command, run through Python.

It is for where the venv's scripts folder is not on the PATH (Windows:
`.venv\\Scripts\\python -m nanospec demo`).
"""

import sys

from nanospec.cli import main

if __name__ == "__main__":
    sys.exit(main())
