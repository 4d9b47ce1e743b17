from commands.main import run

run()
