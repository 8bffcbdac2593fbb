#!/usr/bin/env python
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "durableconsole.settings")
    if sys.argv[1:2] == ["runserver"]:
        # A thread per request: they share a bounded pool of database
        # connections, as the web's other entry points do (docs/deploying.md#database-connections).
        os.environ.setdefault("DB_POOL", "1")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
