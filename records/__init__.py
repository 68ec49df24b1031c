"""Result records: each measured result as a JSON file under ``results/`` with its command, commit and
machine (``store``), made by running a command (``record``), rerun and compared (``reproduce``), and
shown as the docs' tables (``tables``)."""
