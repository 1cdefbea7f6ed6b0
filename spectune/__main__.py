from spectune.cli import main

main()
