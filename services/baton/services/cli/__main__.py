import sys

from baton.services.cli.main import main

sys.exit(main())
