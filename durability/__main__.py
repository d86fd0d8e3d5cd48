"""``python -m durability``: the command line (same as the ``durability`` script)."""

from durability.cli import main

if __name__ == "__main__":
    main()
