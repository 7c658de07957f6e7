"""The command line: its commands (`commands`), the one option set, the aliases `--help` hides, what a terminal is
shown, and the commands that only print (explain, doctor)."""
