from mpsup.cli import main

main()
