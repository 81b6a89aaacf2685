"""Concurrent appends to one Iceberg table through the casaas catalog.

The example ships in the package; this runs it from a checkout::

    python -m casaas.examples.iceberg_appends --writers 4 --commits 10 [--url URL] [--faults P]

(see ``casaas/examples/iceberg_appends.py`` for the options).
"""

from __future__ import annotations

import sys

from casaas.examples.iceberg_appends import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
