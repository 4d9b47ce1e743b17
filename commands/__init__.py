"""The krea-ops command line."""

# Set by the console script (``commands.main.run``): the process ends with its command.
ONE_SHOT = False
