from openblox.cli.main import main

main()
